"""Ingest benchmark: max sustained events/s into Kafka (acks=all) and latency at half of it,
side by side with a bare endpoint on the same server stack, plus the batch endpoint.

Starts its own broker and servers (own home, free ports) and stops them afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.loadgen import Run, http_post, median, run_open_loop, summary, sustained
from tally import broker
from tally.processes import Service, Supervisor, port_in_use
from tally.settings import load_settings
from tally.stack import services
from tests.integration.conftest import free_ports, stack_env

RATES = [250, 500, 1000, 1500, 2000, 3000, 4000, 6000, 8000, 11000, 15000]
SITE = "demo.tally.local"


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


def single(port: int, salt: int) -> Callable[[int], bytes]:
    def make(i: int) -> bytes:
        body = json.dumps(beacon(salt + i)).encode()
        headers = {"Content-Type": "text/plain", "X-Forwarded-For": f"198.18.{i % 250}.{i % 200 + 1}"}
        return http_post("/api/event", port, body, headers)

    return make


def batched(port: int, salt: int, size: int) -> Callable[[int], bytes]:
    def make(i: int) -> bytes:
        body = json.dumps([beacon(salt + i * size + j) for j in range(size)]).encode()
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


def at_half(
    port: int, make: Callable[[int, int], Callable[[int], bytes]], rate: float, repeats: int, seconds: float
) -> list[Run]:
    runs = [
        run_open_loop(port, make(port, 900_000_000 + k * 10_000_000), rate=rate, seconds=seconds)
        for k in range(repeats)
    ]
    return runs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ingest", description=__doc__)
    parser.add_argument("--step-seconds", type=float, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
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
                [
                    sys.executable,
                    "-m",
                    "uvicorn",
                    "bench.bare_app:app",
                    "--port",
                    str(bare_port),
                    "--host",
                    "127.0.0.1",
                    "--workers",
                    workers,
                    "--log-level",
                    "warning",
                    "--no-access-log",
                ],
                port=bare_port,
                ready=lambda: port_in_use(bare_port),
            )
        )
        ingest_port = settings.ingest.port
        print(f"ingest benchmark: {workers} uvicorn workers each, open-loop client on the same 2 cores")
        results = {}
        for label, port in (("bare", bare_port), ("ingest", ingest_port)):
            peak = ramp(port, single, args.step_seconds, label)
            half = at_half(port, single, max(peak / 2, 1), args.repeats, 8)
            results[label] = (peak, half)
        print("\nresults (latency: median over runs at half of that server's own peak):")
        for label, (peak, half) in results.items():
            p50 = median([r.percentile(0.5) for r in half])
            p99 = median([r.percentile(0.99) for r in half])
            p999 = median([r.percentile(0.999) for r in half])
            print(
                f"  {label:<7} peak sustained {peak:6.0f} events/s; at {peak / 2:.0f}/s: p50 {p50:.1f} ms, "
                f"p99 {p99:.1f} ms, p999 {p999:.1f} ms"
            )
        ratio = results["ingest"][0] / results["bare"][0] if results["bare"][0] else float("nan")
        print(f"  ingest / bare peak throughput: {ratio:.0%} (goal >= 60%)")
        batch_peak = ramp(ingest_port, lambda p, s: batched(p, s, 50), args.step_seconds, "batch-50")
        print(f"  batch endpoint (50 events/request): {batch_peak * 50:.0f} events/s sustained (goal >= 100000)")
    finally:
        for name in ("bare", "ingest", "broker"):
            sup.stop(name)


if __name__ == "__main__":
    main()
