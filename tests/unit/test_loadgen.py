"""bench.loadgen against a slow loopback server: the client must stay open-loop.

A server that answers after 50 ms (``slow_server``, tests/unit/conftest.py) can serve
``connections / 0.05`` requests per second over a fixed pool. The generator must open more
connections rather than hold requests back, or its "peak" would measure its own pool, not the server.
"""

from __future__ import annotations

from collections.abc import Callable

from bench.loadgen import Run, http_post, run_open_loop, sustained
from ops.stack import free_ports


def _request(port: int) -> Callable[[int], bytes]:
    body = b'{"x":1}'
    return lambda _i: http_post("/api/event", port, body, {"Content-Type": "text/plain"})


def test_opens_connections_when_every_one_is_busy(slow_server: int) -> None:
    # 2 connections at 50 ms a request carry 40 requests/s; 200/s must still be answered on time.
    run = run_open_loop(slow_server, _request(slow_server), rate=200, seconds=1.0, connections=2)
    assert run.errors == 0
    assert run.statuses == {202: 200}
    assert run.connections > 2
    assert sustained(run), f"p99 {run.percentile(0.99):.0f} ms: requests waited for a connection"


def test_max_connections_bounds_the_pool(slow_server: int) -> None:
    # With the pool capped at 2 the same load queues in the client: latency climbs far past 50 ms.
    run = run_open_loop(slow_server, _request(slow_server), rate=200, seconds=1.0, connections=2, max_connections=2)
    assert run.connections == 2
    assert run.percentile(0.99) > 500
    assert not sustained(run)


def test_a_refused_connection_counts_as_a_failed_request() -> None:
    (port,) = free_ports(1)  # a port with nothing listening on it
    run = run_open_loop(port, _request(port), rate=50, seconds=0.2, connections=0)
    assert run.errors == 10
    assert run.statuses == {}
    assert not sustained(run)


def test_the_warm_up_is_sent_on_the_same_schedule_but_not_timed(slow_server: int) -> None:
    run = run_open_loop(slow_server, _request(slow_server), rate=100, seconds=0.5, warmup_s=0.5, connections=2)
    assert len(run.latencies_ms) == 50 and run.statuses == {202: 50}  # the 50 warm-up requests are not in it
    assert run.warmup_failures == 0 and run.errors == 0
    assert sustained(run)


def test_a_failure_in_the_warm_up_still_fails_the_run() -> None:
    (port,) = free_ports(1)  # a port with nothing listening on it
    run = run_open_loop(port, _request(port), rate=50, seconds=0.2, warmup_s=0.2, connections=0)
    assert (run.warmup_failures, run.errors) == (10, 10)
    answered = Run(50, 0.2, [1.0] * 10, errors=0, statuses={202: 10}, warmup_failures=1)
    assert not sustained(answered)  # every timed request fine, one warm-up request not
