"""Streaming views benchmark: beacon -> visible in agg.traffic_1m latency under steady load.

Starts its own broker, ingest and streaming views (default config: local[*], 5 s trigger), sends
beacons open-loop through ingest, each with its own page path, and polls the 1-minute view with
delta-rs until each path appears. Stops everything it started.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
import uuid
from pathlib import Path

import httpx
import pyarrow.compute as pc
from deltalake import DeltaTable

from bench.homes import in_temporary_home
from bench.report import Figure, print_figures
from ops import broker
from ops.processes import Supervisor
from ops.stack import services, stack_env
from tally.settings import load_settings

BROWSER = "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"


def send_steadily(url: str, site: str, rate: float, seconds: float, sent: dict[str, float], refused: list[str]) -> None:
    """Open loop: one beacon every 1/rate s, each with a unique path; records its send time."""
    client = httpx.Client(timeout=10)
    start = time.monotonic()
    i = 0
    while (due := start + i / rate) < start + seconds:
        time.sleep(max(0.0, due - time.monotonic()))
        path = f"/bench/{uuid.uuid4().hex[:12]}"
        now = int(time.time() * 1000)
        body = {"id": str(uuid.uuid4()), "s": site, "u": f"https://{site}{path}", "te": now, "ts": now}
        # A client address per visitor (ingest trusts X-Forwarded-For from loopback), so the
        # per-client hourly limit does not refuse the load.
        headers = {
            "Content-Type": "text/plain",
            "X-Forwarded-For": f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}",
            "User-Agent": BROWSER,  # httpx's own agent is a crawler's, and views leave crawlers out
        }
        sent[path] = time.monotonic()
        if client.post(url, content=json.dumps(body), headers=headers).status_code != 202:
            refused.append(path)
        i += 1


@in_temporary_home("views")
def measure(home: Path, quick: bool = False, *, rate: float = 20, seconds: float | None = None) -> list[Figure]:
    """One run: start the views job, wait for the first beacon, then latency under steady load."""
    seconds = seconds or (30.0 if quick else 90.0)
    env = stack_env(home) | {"TALLY_ENV": ""}
    os.environ.update(env)
    settings = load_settings()
    table, sup = services(settings), Supervisor(settings.home_dir)
    site = settings.sites[0].site_id
    uri = settings.table_uri("agg.traffic_1m")
    try:
        broker.ensure_formatted(settings)
        sup.start(table["broker"])
        broker.wait_until_ready(settings.kafka.servers)
        broker.ensure_topics(settings)
        sup.start(table["ingest"])
        t0 = time.monotonic()
        sup.start(table["views"])
        url = f"http://127.0.0.1:{settings.ingest.port}/api/event"
        # Warm-up: wait until the first beacon is visible (Spark start-up is not steady state).
        warm: dict[str, float] = {}
        send_steadily(url, site, 1, 1, warm, [])
        while not _visible(uri, set(warm)):
            if time.monotonic() - t0 > 600:
                raise RuntimeError(f"no beacon in agg.traffic_1m after 600 s; see {sup.log_dir / 'views.log'}")
            time.sleep(0.5)
        first_visible = time.monotonic() - t0
        print(f"views job up and first beacon visible after {first_visible:.1f} s", flush=True)
        sent: dict[str, float] = {}
        refused: list[str] = []
        sender = threading.Thread(target=send_steadily, args=(url, site, rate, seconds, sent, refused))
        sender.start()
        seen: dict[str, float] = {}
        deadline = time.monotonic() + seconds + 120
        while (sender.is_alive() or len(seen) < len(sent) - len(refused)) and time.monotonic() < deadline:
            for path in _visible(uri, set(sent) - set(seen) - set(refused)):
                seen[path] = time.monotonic()
            time.sleep(0.5)
        sender.join()
        latencies = sorted(seen[p] - sent[p] for p in seen)
        q = statistics.quantiles(latencies, n=100)
        note = (
            f"{rate:g} beacons/s for {seconds:g} s, {len(seen)}/{len(sent)} visible, {len(refused)} refused;"
            f" trigger {settings.spark.trigger_seconds} s, polled every 0.5 s"
        )
        figures = [Figure("views job start until the first beacon is in agg.traffic_1m", first_visible, "s")]
        for pct in (50, 95, 99):
            goal = "≤ 15 s" if pct == 95 else ""
            figures.append(Figure(f"beacon -> agg.traffic_1m p{pct}", q[pct - 1], "s", goal=goal, note=note))
        figures.append(Figure("beacon -> agg.traffic_1m max", latencies[-1], "s"))
        return figures
    finally:
        for name in ("views", "ingest", "broker"):
            sup.stop(name)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.views", description=__doc__)
    parser.add_argument("--rate", type=float, default=20, help="beacons per second")
    parser.add_argument("--seconds", type=float, help="how long to send (default 90, quick 30)")
    parser.add_argument("--quick", action="store_true", help="a short run (a smoke test)")
    args = parser.parse_args(argv)
    print_figures(measure(args.quick, rate=args.rate, seconds=args.seconds))


def _visible(uri: str, paths: set[str]) -> set[str]:
    if not paths:
        return set()
    try:
        dataset = DeltaTable(uri).to_pyarrow_dataset()
    except Exception:  # not created yet
        return set()
    found = dataset.to_table(columns=["value"], filter=(pc.field("dimension") == "page")).column("value")
    return paths & set(found.to_pylist())


if __name__ == "__main__":
    main()
