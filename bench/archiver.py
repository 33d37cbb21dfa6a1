"""Archiver benchmark: throughput from a pre-filled topic, and beacon -> visible-in-raw latency
under steady load through ingest. Starts its own broker, ingest and archiver; stops them after."""

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
import psutil
import pyarrow.compute as pc
from confluent_kafka import Producer
from deltalake import DeltaTable

from bench.homes import in_temporary_home
from bench.report import Figure, print_figures
from bench.stack import cpu_seconds
from ops import broker
from ops.processes import Supervisor
from ops.stack import services, stack_env
from tally.schema import PageViewEvent
from tally.settings import Settings, load_settings


class RowCounter:
    """Rows in a Delta table, from one table object read incrementally (cheap to poll)."""

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self.table: DeltaTable | None = None

    def __call__(self) -> int:
        try:
            if self.table is None:
                self.table = DeltaTable(self.uri)
            else:
                self.table.update_incremental()
            return int(self.table.to_pyarrow_dataset().count_rows())
        except Exception:
            return 0


@in_temporary_home("archiver")
def measure(
    home: Path, quick: bool = False, *, events: int | None = None, rate: float = 200, seconds: float | None = None
) -> list[Figure]:
    """One run: archive a pre-filled topic, then beacon -> raw latency under steady load."""
    events = events or (100_000 if quick else 500_000)
    seconds = seconds or (10.0 if quick else 30.0)
    env = stack_env(home) | {"TALLY_ENV": ""}
    os.environ.update(env)
    settings = load_settings()
    table, sup = services(settings), Supervisor(settings.home_dir)
    uri = settings.table_uri("raw.pageviews")
    try:
        broker.ensure_formatted(settings)
        sup.start(table["broker"])
        broker.ensure_topics(settings)
        prefill(settings, events)
        started = time.monotonic()
        process = psutil.Process(sup.start(table["archiver"]).pid)
        raw_rows = RowCounter(uri)
        first_commit, first_rows, first_cpu = 0.0, 0, 0.0
        while (rows := raw_rows()) < events and time.monotonic() - started < 600:
            if rows and not first_commit:
                first_commit, first_rows, first_cpu = time.monotonic(), rows, cpu_seconds(process)
            time.sleep(0.1)
        elapsed = time.monotonic() - started
        steady = (events - first_rows) / (time.monotonic() - first_commit) if first_commit else float("nan")
        cpu_per_event = (cpu_seconds(process) - first_cpu) / (events - first_rows) * 1e6 if first_commit else 0.0
        figures = [
            Figure("throughput including process start", events / elapsed, "events/s", note=f"{events:,} pre-filled"),
            Figure("throughput after the first commit", steady, "events/s", goal="≥ 50,000"),
            # CPU time is what the goal depends on with two cores; wall clock moves with the machine's load.
            Figure("archiver CPU time per event after the first commit", cpu_per_event, "µs", note="user + system"),
        ]
        sup.start(table["ingest"])
        url = f"http://127.0.0.1:{settings.ingest.port}/api/event"
        sent: dict[str, float] = {}
        seen: dict[str, float] = {}
        client = httpx.Client(headers={"Content-Type": "text/plain", "User-Agent": "Mozilla/5.0 Firefox/133.0"})
        run_ms = int(time.time() * 1000)
        stop = threading.Event()
        watcher = threading.Thread(target=_watch, args=(uri, sent, seen, run_ms, stop), daemon=True)
        watcher.start()
        t0, n = time.monotonic(), 0
        while time.monotonic() - t0 < seconds:
            delay = t0 + n / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            event_id = str(uuid.uuid4())
            ms = int(time.time() * 1000)
            body = {"id": event_id, "s": "demo.tally.local", "u": "https://demo.tally.local/l", "te": ms, "ts": ms}
            sent[event_id] = time.monotonic()
            client.post(url, content=json.dumps(body), headers={"X-Forwarded-For": f"198.18.1.{n % 250}"})
            n += 1
        deadline = time.monotonic() + 30
        while len(seen) < len(sent) and time.monotonic() < deadline:
            time.sleep(0.25)
        stop.set()
        watcher.join()
        latencies = sorted((seen[i] - sent[i]) * 1000 for i in seen)
        q = statistics.quantiles(latencies, n=100)
        achieved = len(sent) / seconds  # one client waiting for each 202: below ``rate`` when ingest answers slowly
        note = f"{achieved:.0f} beacons/s ({rate:g} asked) for {seconds:g} s, {len(seen)}/{len(sent)} seen"
        note += "; 100 ms polling"
        for pct in (50, 95, 99):
            goal = "≤ 5,000 ms" if pct == 99 else ""
            figures.append(Figure(f"beacon -> raw.pageviews p{pct}", q[pct - 1], "ms", goal=goal, note=note))
        return figures
    finally:
        for name in ("ingest", "archiver", "broker"):
            sup.stop(name)


def prefill(settings: Settings, events: int) -> None:
    """Produce ``events`` enriched page views to the pageviews topic (as ingest would), and flush."""
    producer = Producer({"bootstrap.servers": settings.kafka.servers, "linger.ms": 20, "compression.type": "lz4"})
    now = int(time.time() * 1000)
    for i in range(events):
        e = PageViewEvent(
            event_id=str(uuid.uuid4()),
            type="pageview",
            site_id="demo.tally.local",
            url=f"https://demo.tally.local/p{i % 40}",
            hostname="demo.tally.local",
            path=f"/p{i % 40}",
            ts_event=now,
            ts_sent=now,
            ts_received=now,
            event_time=now,
            visitor_id=f"{i % 5000:032x}",
            browser="Firefox",
            os="Linux",
            device="desktop",
            channel="Direct",
        )
        while True:
            try:
                producer.produce(settings.kafka.pageviews_topic, key=e.visitor_id.encode(), value=e.to_json())
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(60)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.archiver", description=__doc__)
    parser.add_argument("--events", type=int, help="events pre-filled into the topic (default 500k, quick 100k)")
    parser.add_argument("--rate", type=float, default=200, help="beacons/s for the latency run")
    parser.add_argument("--seconds", type=float, help="duration of the latency run (default 30, quick 10)")
    parser.add_argument("--quick", action="store_true", help="a short run (a smoke test)")
    args = parser.parse_args(argv)
    print_figures(measure(args.quick, events=args.events, rate=args.rate, seconds=args.seconds))


def _watch(uri: str, sent: dict[str, float], seen: dict[str, float], since_ms: int, stop: threading.Event) -> None:
    """Poll raw.pageviews every 100 ms (one table object, incremental log reads) and note when
    each sent event first becomes visible."""
    table: DeltaTable | None = None
    while not stop.is_set():
        try:
            if table is None:
                table = DeltaTable(uri)
            else:
                table.update_incremental()
            # Only files whose ts_received range reaches the run (Delta file statistics prune the rest).
            ids = table.to_pyarrow_dataset().to_table(columns=["event_id"], filter=pc.field("ts_received") >= since_ms)
        except Exception:
            time.sleep(0.1)
            continue
        now = time.monotonic()
        for event_id in ids.column("event_id").to_pylist():
            if event_id in sent and event_id not in seen:
                seen[event_id] = now
        time.sleep(0.1)


if __name__ == "__main__":
    main()
