"""Ingest benchmark: max sustained events/s into Kafka (acks=all) and latency at half of it,
side by side with a bare endpoint on the same server stack, plus the batch endpoint.

Starts its own broker and servers (own home, free ports) and stops them afterwards.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.loadgen import http_post, run_open_loop, summary, sustained
from bench.report import Figure, print_figures
from tally import broker
from tally.processes import Service, Supervisor, port_in_use
from tally.settings import load_settings
from tally.stack import services
from tests.integration.conftest import free_ports, stack_env

RATES = [250, 500, 1000, 1500, 2000, 3000, 4000, 6000, 8000, 11000, 15000]
SITE = "demo.tally.local"
BARE_PEAK = "bare endpoint: peak sustained"
UVICORN = [sys.executable, "-m", "uvicorn", "--host", "127.0.0.1", "--log-level", "warning", "--no-access-log"]


def beacon(i: int) -> dict[str, object]:
    h = f"{i:032x}"
    event_id = f"{h[:8]}-{h[8:12]}-4{h[13:16]}-8{h[17:20]}-{h[20:32]}"
    return {
        "id": event_id,
        "s": SITE,
        "u": f"https://{SITE}/p{i % 50}",
        "te": 1_795_000_000_000 + i,
        "ts": 1_795_000_000_000 + i,
    }


# beacon(n) as JSON text, for n < 2**48 (its id is then this prefix and n in hex). The client
# formats these, several times cheaper than json.dumps of dicts: it shares the server's two cores.
BEACON_JSON = '{"id":"00000000-0000-4000-8000-%012x","s":"' + SITE + '","u":"https://' + SITE + '/p%d","te":%d,"ts":%d}'


def beacon_json(n: int) -> str:
    assert n < 2**48, "BEACON_JSON holds the id's last 48 bits only"
    return BEACON_JSON % (n, n % 50, 1_795_000_000_000 + n, 1_795_000_000_000 + n)


def single(port: int, salt: int) -> Callable[[int], bytes]:
    def make(i: int) -> bytes:
        body = beacon_json(salt + i).encode()
        headers = {"Content-Type": "text/plain", "X-Forwarded-For": f"198.18.{i % 250}.{i % 200 + 1}"}
        return http_post("/api/event", port, body, headers)

    return make


def batched(port: int, salt: int, size: int) -> Callable[[int], bytes]:
    def make(i: int) -> bytes:
        first = salt + i * size
        body = ("[" + ",".join([beacon_json(n) for n in range(first, first + size)]) + "]").encode()
        return http_post("/api/event", port, body, {"Content-Type": "text/plain", "X-Forwarded-For": "198.18.0.1"})

    return make


def ramp(port: int, make: Callable[[int, int], Callable[[int], bytes]], seconds: float, label: str) -> float:
    """The highest offered rate that was sustained (requests/s), after a warm-up that is not counted."""
    run_open_loop(port, make(port, 2_000_000_000), rate=100, seconds=3)  # connections, producer id, caches
    peak = 0.0
    for n, rate in enumerate(RATES):
        run = run_open_loop(port, make(port, n * 10_000_000), rate=rate, seconds=seconds)
        print(f"  {label} ramp: {summary(run)}", flush=True)
        if not sustained(run):
            break
        peak = rate
    return peak


def measure(
    quick: bool = False, *, step_seconds: float | None = None, half_seconds: float | None = None
) -> list[Figure]:
    """One run: ramp each server to its highest sustained rate, then latency at half of it, then the batch endpoint."""
    step = step_seconds or (2.0 if quick else 4.0)
    half_s = half_seconds or (4.0 if quick else 8.0)
    home = Path(tempfile.mkdtemp(prefix="tally-bench-ingest-"))
    env = stack_env(home) | {
        "TALLY_RATELIMIT__CLIENT_PAGEVIEWS_PER_HOUR": "1000000000",
        "TALLY_RATELIMIT__SITE_EVENTS_PER_SECOND": "1000000000",
        "TALLY_ENV": "",
    }
    os.environ.update(env)
    settings = load_settings()
    sup = Supervisor(settings.home_dir)
    (bare_port,) = free_ports(1)
    workers = str(settings.ingest.workers)
    try:
        broker.ensure_formatted(settings)
        sup.start(services(settings)["broker"])
        broker.ensure_topics(settings)
        sup.start(services(settings)["ingest"])
        sup.start(
            Service(
                "bare",
                [*UVICORN, "bench.bare_app:app", "--port", str(bare_port), "--workers", workers],
                port=bare_port,
                ready=lambda: port_in_use(bare_port),
            )
        )
        print(f"ingest benchmark: {workers} uvicorn workers each, open-loop client on the same 2 cores", flush=True)
        figures: list[Figure] = []
        for label, port in (("bare endpoint", bare_port), ("ingest", settings.ingest.port)):
            peak = ramp(port, single, step, label)
            half = run_open_loop(port, single(port, 900_000_000), rate=max(peak / 2, 1), seconds=half_s)
            print(f"  {label} at half of its peak: {summary(half)}", flush=True)
            if label == "ingest":  # side by side with the bare endpoint on the same server stack
                figures.append(Figure(f"{label}: peak sustained", peak, "events/s", BARE_PEAK, "≥ 0.6× bare"))
            else:
                figures.append(Figure(BARE_PEAK, peak, "events/s"))
            for q, name in ((0.5, "p50"), (0.99, "p99"), (0.999, "p999")):
                goal = "≤ 25 ms" if (label, name) == ("ingest", "p99") else ""
                figures.append(Figure(f"{label}: {name} at half of peak", half.percentile(q), "ms", goal=goal))
        batch_peak = ramp(settings.ingest.port, lambda p, s: batched(p, s, 50), step, "batch-50")
        figures.append(
            Figure("ingest: batch endpoint, 50 events a request", batch_peak * 50, "events/s", goal="≥ 100,000")
        )
        return figures
    finally:
        for name in ("bare", "ingest", "broker"):
            sup.stop(name)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ingest", description=__doc__)
    parser.add_argument("--step-seconds", type=float, help="duration of each ramp step (default 4, quick 2)")
    parser.add_argument("--half-seconds", type=float, help="duration of the run at half of peak (default 8, quick 4)")
    parser.add_argument("--quick", action="store_true", help="short steps (a smoke test)")
    args = parser.parse_args(argv)
    print_figures(measure(args.quick, step_seconds=args.step_seconds, half_seconds=args.half_seconds))


if __name__ == "__main__":
    main()
