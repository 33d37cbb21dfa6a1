"""Ingest benchmark: max sustained events/s into Kafka (acks=all) and latency at half of it,
side by side with a bare endpoint on the same server stack, plus the batch endpoint, and the
broker's own limit (``kafka-producer-perf-test``, bench.ceiling) in the same run.

The bare endpoint (bench/bare_app.py) runs with ingest's uvicorn options and tuning. Every
measured step counts only if Kafka took its events: ingest answers 202 also when it wrote the
event to its local spool instead (Kafka down, or slower than ``ingest.ack_timeout_ms``), and
that is not the throughput of the pipeline; :class:`SpoolWatch` fails the run when it happens.

Starts its own broker and servers (own home, free ports) and stops them afterwards.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psutil
from prometheus_client.parser import text_string_to_metric_families

from bench.ceiling import measure_ceiling
from bench.homes import in_temporary_home
from bench.loadgen import Run, http_post, run_open_loop, summary, sustained
from bench.report import Figure, print_figures
from bench.stack import cpu_seconds
from ingest.app import COUNTS_FLUSH_S
from ops import broker
from ops.processes import Service, Supervisor, port_in_use
from ops.stack import free_ports, services, stack_env
from tally.settings import Settings, load_settings

RATES = [250, 500, 1000, 1500, 2000, 3000, 4000, 6000, 8000, 11000, 15000, 20000, 25000]
WARMUP_RATE = 500
# Each step (and the run at half of peak) first sends at its rate for this long, untimed: the
# client opens the connections the server's response time needs at that rate, and only the
# steady state is measured (bench.loadgen.run_open_loop's warm-up).
STEP_WARMUP_S = 1.0
SITE = "demo.tally.local"
BARE_PEAK = "bare endpoint: peak sustained"
BATCH = "ingest: batch endpoint, 50 events a request"
KAFKA_ALONE = "Kafka alone: kafka-producer-perf-test"
# After every step (on both servers alike), ingest's counters reach /metrics before they are read.
SETTLE_S = COUNTS_FLUSH_S + 0.5
SPOOLED = ("tally_ingest_stored_total", "spool")  # ingest's counter of events made durable in the spool
AfterStep = Callable[[str, str], None]  # (server label, what the step was) -> None; raises to fail the run


class SpooledAccepts(RuntimeError):
    """A measured step was answered 202 from the spool, not by Kafka: its rate is not ingest's into Kafka."""


def spooled_events(metrics: str) -> float:
    """Events ingest stored in its spool, from its Prometheus text (0 when not counted yet)."""
    name, store = SPOOLED
    return sum(
        sample.value
        for family in text_string_to_metric_families(metrics)
        for sample in family.samples
        if sample.name == name and sample.labels.get("store") == store
    )


class SpoolWatch:
    """Fails the run when ingest's spool counter grew since the last look (:meth:`check`)."""

    def __init__(self, read_metrics: Callable[[], str]) -> None:
        self._read = read_metrics
        self.seen = spooled_events(read_metrics())

    def check(self, step: str) -> None:
        """Raise :class:`SpooledAccepts` if events went to the spool since the last check."""
        now = spooled_events(self._read())
        if now > self.seen:
            raise SpooledAccepts(
                f"{now - self.seen:,.0f} events of {step} were answered 202 from ingest's spool, not by Kafka"
                ' (tally_ingest_stored_total{store="spool"}): the step measured the spool\'s fsync, not'
                " the pipeline; see the broker's log and ingest.ack_timeout_ms"
            )


def metrics_reader(port: int) -> Callable[[], str]:
    """Reads ingest's Prometheus text from 127.0.0.1:``port`` (ingest.metrics_port)."""

    def read() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            text: str = response.read().decode()
            return text

    return read


def pause_and_check(checks: dict[str, Callable[[str], None]], pause_s: float = SETTLE_S) -> AfterStep:
    """What follows each step of any server: the same pause (fair to both), then that server's check, if any."""

    def after(label: str, step: str) -> None:
        time.sleep(pause_s)
        if label in checks:
            checks[label](f"{label} {step}")

    return after


def no_pause(_label: str, _step: str) -> None:
    """The default after a step: nothing."""


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


def ramp(
    servers: dict[str, int],
    make: Callable[[int, int], Callable[[int], bytes]],
    seconds: float,
    *,
    warmup_s: float = 30.0,
    refine: int = 3,
    step_warmup_s: float = STEP_WARMUP_S,
    after_step: AfterStep = no_pause,
) -> dict[str, float]:
    """Each server's highest offered rate that was sustained (requests/s), ramped side by side.

    ``servers`` maps a label to a port. Each server first gets a warm-up at a moderate rate for
    ``warmup_s`` that is not counted: the Kafka broker is a JVM, and until its JIT compiler has
    compiled the produce path it costs several times more CPU per event, on the same two cores.
    Then the rate climbs through ``RATES``, one step for each server in turn at every rate (the
    order alternating from rate to rate), so a change in the shared machine's load lands on both
    servers alike rather than on whichever ramp happened to run then. A server drops out at its
    first step not sustained; the step between its last rate sustained and that one is then
    halved ``refine`` times, again taking turns. A step not sustained is run once more at once,
    and fails only if it fails twice in a row: the two cores are shared, and one stall of a few
    hundred milliseconds in a 4 s step must not set a server's peak (it hit either server alike).

    Every step begins with ``step_warmup_s`` at its rate that is not timed (its failures still
    count). A step starts from the client's first 64 connections, and a server whose answers
    take 10 ms (Kafka's acknowledgement) needs more of them at a few thousand requests a second:
    ingest at 8,000/s opened up to 1,024, and every 100 ms slice of its worst latency lay in the
    first 0.8 s of the step. That burst, on the same two cores, is the client's start-up, not
    the server's sustained rate.

    ``after_step(label, step)`` runs after every step (each attempt) of every server, e.g.
    :func:`pause_and_check`; it raises to fail the run.
    """
    for port in servers.values():
        run_open_loop(port, make(port, 2_000_000_000), rate=WARMUP_RATE, seconds=warmup_s)
    peak = dict.fromkeys(servers, 0.0)
    failed = dict.fromkeys(servers, 0.0)

    def step(label: str, rate: float, salt: int, kind: str) -> bool:
        port = servers[label]
        for attempt in ("", " again"):
            run = run_open_loop(port, make(port, salt * 10_000_000), rate=rate, seconds=seconds, warmup_s=step_warmup_s)
            print(f"  {label} {kind}{attempt}: {summary(run)}", flush=True)
            after_step(label, f"{kind}{attempt} at {rate:,.0f}/s")
            if sustained(run):
                return True
            salt += 1_000  # fresh event ids for the second attempt
        return False

    for n, rate in enumerate(RATES):
        climbing = [label for label in servers if not failed[label]]
        if not climbing:
            break
        for label in climbing if n % 2 == 0 else climbing[::-1]:
            if step(label, rate, n, "ramp"):
                peak[label] = rate
            else:
                failed[label] = rate
    for n in range(refine):
        for label in servers:
            if not (failed[label] and peak[label]):
                continue
            rate = round((peak[label] + failed[label]) / 2)
            if step(label, rate, len(RATES) + n, "refine"):
                peak[label] = rate
            else:
                failed[label] = rate
    return peak


@in_temporary_home("ingest")
def measure(
    home: Path, quick: bool = False, *, step_seconds: float | None = None, half_seconds: float | None = None
) -> list[Figure]:
    """One run: ramp each server to its highest sustained rate, then latency at half of it, then
    the batch endpoint, then Kafka's own limit on the same broker."""
    step = step_seconds or (2.0 if quick else 4.0)
    half_s = half_seconds or (4.0 if quick else 8.0)
    warmup_s = 5.0 if quick else 30.0
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
        broker_process = psutil.Process(sup.start(services(settings)["broker"]).pid)
        broker.ensure_topics(settings)
        ingest_run = sup.start(services(settings)["ingest"])
        bare = sup.start(
            Service(
                "bare",
                [sys.executable, "-m", "bench.bare_app", "--port", str(bare_port), "--workers", workers],
                port=bare_port,
                ready=lambda: port_in_use(bare_port),
            )
        )
        print(f"ingest benchmark: {workers} uvicorn workers each, open-loop client on the same 2 cores", flush=True)
        watch = SpoolWatch(metrics_reader(settings.ingest.metrics_port))
        after_step = pause_and_check({"ingest": watch.check, "batch-50": watch.check})
        figures: list[Figure] = []
        servers = (("bare endpoint", bare_port, bare.pid), ("ingest", settings.ingest.port, ingest_run.pid))
        peaks = ramp(
            {label: port for label, port, _ in servers}, single, step, warmup_s=warmup_s, after_step=after_step
        )
        for label, port, pid in servers:
            peak = peaks[label]
            figures += half_of_peak(label, port, peak, half_s, psutil.Process(pid), broker_process)
            after_step(label, "at half of its peak")
        # The broker and ingest are warm by now: a short warm-up opens the connections.
        batch = ramp(
            {"batch-50": settings.ingest.port},
            lambda p, s: batched(p, s, 50),
            step,
            warmup_s=3,
            after_step=after_step,
        )
        watch.check("the batch endpoint's ramp")
        figures.append(Figure(BATCH, batch["batch-50"] * 50, "events/s", KAFKA_ALONE, goal="≥ 100,000"))
        figures += kafka_alone(settings, home, quick)
        return figures
    finally:
        for name in ("bare", "ingest", "broker"):
            sup.stop(name)


def half_of_peak(
    label: str, port: int, peak: float, seconds: float, server: psutil.Process, broker_process: psutil.Process
) -> list[Figure]:
    """Latency and CPU per request of one server at half of its peak."""
    server_cpu, broker_cpu = cpu_seconds(server, children=True), cpu_seconds(broker_process)
    half = run_open_loop(
        port, single(port, 900_000_000), rate=max(peak / 2, 1), seconds=seconds, warmup_s=STEP_WARMUP_S
    )
    print(f"  {label} at half of its peak: {summary(half)}", flush=True)
    per_request = 1e6 / max(sent(half), 1)  # CPU seconds -> µs per request
    served = (cpu_seconds(server, children=True) - server_cpu) * per_request
    cpu_note = "user + system, every worker, during the run at half of peak"
    figures = [Figure(f"{label}: server CPU per request", served, "µs", note=cpu_note)]
    if label == "ingest":
        brokered = (cpu_seconds(broker_process) - broker_cpu) * per_request
        figures.append(Figure("ingest: Kafka broker CPU per request", brokered, "µs", note="incl. its idle background"))
        # side by side with the bare endpoint on the same server stack and tuning
        figures.append(Figure(f"{label}: peak sustained", peak, "events/s", BARE_PEAK, "≥ 0.6× bare"))
    else:
        figures.append(Figure(BARE_PEAK, peak, "events/s"))
    for q, name in ((0.5, "p50"), (0.99, "p99"), (0.999, "p999")):
        goal = "≤ 25 ms" if (label, name) == ("ingest", "p99") else ""
        figures.append(Figure(f"{label}: {name} at half of peak", half.percentile(q), "ms", goal=goal))
    return figures


def sent(run: Run) -> int:
    """Requests a run sent, its untimed warm-up included (the CPU measured covers it too)."""
    return len(run.latencies_ms) + run.warmup_requests


def kafka_alone(settings: Settings, home: Path, quick: bool) -> list[Figure]:
    """The broker's own limit for ingest's records, on the broker ingest just used (bench.ceiling)."""
    records, warmup = (200_000, 50_000) if quick else (1_000_000, 300_000)
    ceiling = measure_ceiling(settings, home, records=records, warmup_records=warmup)
    result = ceiling.result
    print(f"  Kafka alone: {result}", flush=True)
    topic = ", ".join(f"{k}={v}" for k, v in ceiling.topic_settings.items())
    note = (
        f"{result.records:,} records unthrottled after {warmup:,} of warm-up; acks=all, idempotent, lz4,"
        f" linger.ms={settings.ingest.linger_ms:g}, batch.size=1 MB; topic as ingest's ({topic}); no keys"
    )
    return [
        Figure(KAFKA_ALONE, result.records_per_s, "events/s", note=note),
        Figure("Kafka alone: p99 latency", result.p99_ms, "ms"),
        Figure(
            "ingest's Kafka records: mean value size", ceiling.record_bytes, "bytes", note="the perf test's payload"
        ),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ingest", description=__doc__)
    parser.add_argument("--step-seconds", type=float, help="duration of each ramp step (default 4, quick 2)")
    parser.add_argument("--half-seconds", type=float, help="duration of the run at half of peak (default 8, quick 4)")
    parser.add_argument("--quick", action="store_true", help="short steps (a smoke test)")
    args = parser.parse_args(argv)
    print_figures(measure(args.quick, step_seconds=args.step_seconds, half_seconds=args.half_seconds))


if __name__ == "__main__":
    main()
