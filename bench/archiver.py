"""Archiver benchmark: throughput from a pre-filled topic, and beacon -> visible-in-raw latency
under steady load through ingest. Starts its own broker, ingest and archiver; stops them after."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import pyarrow.compute as pc
from confluent_kafka import Producer
from deltalake import DeltaTable

from tally import broker
from tally.processes import Supervisor
from tally.schema import PageViewEvent
from tally.settings import load_settings
from tally.stack import services
from tests.integration.conftest import stack_env


def raw_rows(uri: str) -> int:
    try:
        return int(DeltaTable(uri).to_pyarrow_table(columns=["event_id"]).num_rows)
    except Exception:
        return 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.archiver", description=__doc__)
    parser.add_argument("--events", type=int, default=200_000, help="events pre-filled into the topic")
    parser.add_argument("--rate", type=float, default=200, help="beacons/s for the latency run")
    parser.add_argument("--seconds", type=float, default=30, help="duration of the latency run")
    args = parser.parse_args(argv)
    env = stack_env(Path(tempfile.mkdtemp(prefix="tally-bench-archiver-"))) | {"TALLY_ENV": ""}
    os.environ.update(env)
    settings = load_settings()
    table, sup = services(settings), Supervisor(settings.home_dir)
    uri = settings.table_uri("raw.pageviews")
    try:
        broker.ensure_formatted(settings)
        sup.start(table["broker"])
        broker.ensure_topics(settings)
        producer = Producer({"bootstrap.servers": settings.kafka.servers, "linger.ms": 20, "compression.type": "lz4"})
        now = int(time.time() * 1000)
        for i in range(args.events):
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
        started = time.monotonic()
        sup.start(table["archiver"])
        while raw_rows(uri) < args.events and time.monotonic() - started < 600:
            time.sleep(0.5)
        elapsed = time.monotonic() - started
        print(
            f"archiver throughput: {args.events} pre-filled events archived in {elapsed:.1f} s "
            f"= {args.events / elapsed:,.0f} events/s (includes process start and dedup-state load; goal >= 50k)"
        )

        sup.start(table["ingest"])
        url = f"http://127.0.0.1:{settings.ingest.port}/api/event"
        sent: dict[str, float] = {}
        seen: dict[str, float] = {}
        client = httpx.Client(headers={"Content-Type": "text/plain", "User-Agent": "Mozilla/5.0 Firefox/133.0"})
        t0, run_ms = time.monotonic(), int(time.time() * 1000)
        n, last_poll = 0, 0.0
        while time.monotonic() - t0 < args.seconds:
            due = t0 + n / args.rate
            if time.monotonic() >= due:
                event_id = str(uuid.uuid4())
                ms = int(time.time() * 1000)
                body = {"id": event_id, "s": "demo.tally.local", "u": "https://demo.tally.local/l", "te": ms, "ts": ms}
                client.post(url, content=json.dumps(body), headers={"X-Forwarded-For": f"198.18.1.{n % 250}"})
                sent[event_id] = time.monotonic()
                n += 1
            elif time.monotonic() - last_poll > 0.25:
                last_poll = time.monotonic()
                _collect(uri, sent, seen, run_ms)
            else:
                time.sleep(0.001)
        deadline = time.monotonic() + 30
        while len(seen) < len(sent) and time.monotonic() < deadline:
            _collect(uri, sent, seen, run_ms)
            time.sleep(0.25)
        latencies = sorted((seen[i] - sent[i]) * 1000 for i in seen)
        q = statistics.quantiles(latencies, n=100)
        print(
            f"beacon -> visible in raw.pageviews at {args.rate:.0f}/s for {args.seconds:.0f} s: "
            f"{len(seen)}/{len(sent)} seen; p50 {q[49]:.0f} ms, p95 {q[94]:.0f} ms, p99 {q[98]:.0f} ms "
            "(goal p99 <= 5000 ms; "
            f"polling every 250 ms adds up to 250 ms)"
        )
    finally:
        for name in ("ingest", "archiver", "broker"):
            sup.stop(name)


def _collect(uri: str, sent: dict[str, float], seen: dict[str, float], since_ms: int) -> None:
    try:
        # Only files whose ts_received range reaches the run (Delta file statistics prune the rest).
        dataset = DeltaTable(uri).to_pyarrow_dataset()
        ids = (
            dataset.to_table(columns=["event_id"], filter=pc.field("ts_received") >= since_ms)
            .column("event_id")
            .to_pylist()
        )
    except Exception:
        return
    now = time.monotonic()
    for event_id in ids:
        if event_id in sent and event_id not in seen:
            seen[event_id] = now


if __name__ == "__main__":
    main()
