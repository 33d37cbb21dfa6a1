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

import psutil

from bench.loadgen import http_post, run_open_loop, summary, sustained
from bench.report import Figure, print_figures
from bench.stack import cpu_seconds
from ops import broker
from ops.processes import Service, Supervisor, port_in_use
from ops.stack import free_ports, services, stack_env
from tally.settings import load_settings

RATES = [250, 500, 1000, 1500, 2000, 3000, 4000, 6000, 8000, 11000, 15000, 20000, 25000]
WARMUP_RATE = 500
# Each step (and the run at half of peak) first sends at its rate for this long, untimed: the
# client opens the connections the server's response time needs at that rate, and only the
# steady state is measured (bench.loadgen.run_open_loop's warm-up).
STEP_WARMUP_S = 1.0
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


def ramp(
    servers: dict[str, int],
    make: Callable[[int, int], Callable[[int], bytes]],
    seconds: float,
    *,
    warmup_s: float = 30.0,
    refine: int = 3,
    step_warmup_s: float = STEP_WARMUP_S,
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


def measure(
    quick: bool = False, *, step_seconds: float | None = None, half_seconds: float | None = None
) -> list[Figure]:
    """One run: ramp each server to its highest sustained rate, then latency at half of it, then the batch endpoint."""
    step = step_seconds or (2.0 if quick else 4.0)
    half_s = half_seconds or (4.0 if quick else 8.0)
    warmup_s = 5.0 if quick else 30.0
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
        broker_process = psutil.Process(sup.start(services(settings)["broker"]).pid)
        broker.ensure_topics(settings)
        ingest_run = sup.start(services(settings)["ingest"])
        bare = sup.start(
            Service(
                "bare",
                [*UVICORN, "bench.bare_app:app", "--port", str(bare_port), "--workers", workers],
                port=bare_port,
                ready=lambda: port_in_use(bare_port),
            )
        )
        print(f"ingest benchmark: {workers} uvicorn workers each, open-loop client on the same 2 cores", flush=True)
        figures: list[Figure] = []
        servers = (("bare endpoint", bare_port, bare.pid), ("ingest", settings.ingest.port, ingest_run.pid))
        peaks = ramp({label: port for label, port, _ in servers}, single, step, warmup_s=warmup_s)
        for label, port, pid in servers:
            peak = peaks[label]
            server = psutil.Process(pid)
            server_cpu, broker_cpu = cpu_seconds(server, children=True), cpu_seconds(broker_process)
            half_rate = max(peak / 2, 1)
            half = run_open_loop(
                port, single(port, 900_000_000), rate=half_rate, seconds=half_s, warmup_s=STEP_WARMUP_S
            )
            sent = len(half.latencies_ms) + half.warmup_requests  # the CPU below covers the warm-up too
            per_request = 1e6 / max(sent, 1)  # CPU seconds -> µs per request
            print(f"  {label} at half of its peak: {summary(half)}", flush=True)
            served = (cpu_seconds(server, children=True) - server_cpu) * per_request
            cpu_note = "user + system, every worker, during the run at half of peak"
            figures.append(Figure(f"{label}: server CPU per request", served, "µs", note=cpu_note))
            if label == "ingest":
                brokered = (cpu_seconds(broker_process) - broker_cpu) * per_request
                figures.append(
                    Figure("ingest: Kafka broker CPU per request", brokered, "µs", note="incl. its idle background")
                )
                # side by side with the bare endpoint on the same server stack
                figures.append(Figure(f"{label}: peak sustained", peak, "events/s", BARE_PEAK, "≥ 0.6× bare"))
            else:
                figures.append(Figure(BARE_PEAK, peak, "events/s"))
            for q, name in ((0.5, "p50"), (0.99, "p99"), (0.999, "p999")):
                goal = "≤ 25 ms" if (label, name) == ("ingest", "p99") else ""
                figures.append(Figure(f"{label}: {name} at half of peak", half.percentile(q), "ms", goal=goal))
        # The broker and ingest are warm by now: a short warm-up opens the connections.
        batch = ramp({"batch-50": settings.ingest.port}, lambda p, s: batched(p, s, 50), step, warmup_s=3)
        batch_peak = batch["batch-50"]
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
