"""The archiver: exactly once into raw.pageviews under kill -9, duplicates and poison messages."""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
import uuid
from collections import Counter

import httpx
import pyarrow.compute as pc
from confluent_kafka import Producer
from deltalake import DeltaTable

from tally.processes import Supervisor
from tally.settings import Settings
from tally.stack import services
from tests.events import page_view
from tests.integration.conftest import wait_for


def raw_count_by_id(settings: Settings, ids: set[str]) -> Counter[str]:
    try:
        table = DeltaTable(settings.table_uri("raw.pageviews")).to_pyarrow_table(columns=["event_id"])
    except Exception:
        return Counter()
    column = table.column("event_id")
    mask = pc.is_in(column, value_set=__import__("pyarrow").array(sorted(ids)))
    return Counter(column.filter(mask).to_pylist())


def test_duplicates_are_archived_once_and_poison_goes_to_rejected(settings: Settings, archiver: None) -> None:
    site = settings.sites[0].site_id
    original = page_view(site)
    marker = uuid.uuid4().hex
    producer = Producer({"bootstrap.servers": settings.kafka.servers, "enable.idempotence": True})
    topic = settings.kafka.pageviews_topic
    key = original.visitor_id.encode()
    producer.produce(topic, key=key, value=original.to_json())
    producer.produce(topic, key=key, value=original.to_json())  # a retry that reached Kafka twice
    producer.produce(topic, key=key, value=f"not json {marker}".encode())
    producer.produce(topic, key=key, value=json.dumps({"event_id": marker, "event_time": "late"}).encode())
    producer.flush(10)
    wait_for(
        lambda: raw_count_by_id(settings, {original.event_id}) == Counter({original.event_id: 1}),
        60,
        "the event in raw.pageviews",
    )

    def poison() -> list[str]:
        try:
            rows = DeltaTable(settings.table_uri("raw.rejected")).to_pyarrow_table().to_pylist()
        except Exception:
            return []
        return [r["kind"] for r in rows if marker in (r["payload"] or "") and r["source_topic"] == topic]

    wait_for(lambda: len(poison()) == 2, 60, "both poison messages in raw.rejected")
    assert poison() == ["undecodable_event", "undecodable_event"]
    time.sleep(3)  # a later batch must not add the duplicate either
    assert raw_count_by_id(settings, {original.event_id}) == Counter({original.event_id: 1})


def test_kill_9_at_any_moment_loses_and_doubles_nothing(
    settings: Settings, supervisor: Supervisor, archiver: None
) -> None:
    site, total = settings.sites[0].site_id, 6000
    ids = [str(uuid.uuid4()) for _ in range(total)]

    def produce_steadily() -> None:
        producer = Producer({"bootstrap.servers": settings.kafka.servers, "enable.idempotence": True, "linger.ms": 5})
        for i, event_id in enumerate(ids):
            e = page_view(site, event_id=event_id)
            producer.produce(settings.kafka.pageviews_topic, key=e.visitor_id.encode(), value=e.to_json())
            if i % 200 == 0:
                producer.poll(0)
                time.sleep(0.1)  # ~2000 events/s for ~3 s
        producer.flush(30)

    writer = threading.Thread(target=produce_steadily)
    writer.start()
    rng = random.Random(11)
    for _ in range(3):
        time.sleep(rng.uniform(0.5, 2.0))
        running = supervisor.find("archiver")
        assert running is not None
        os.kill(running.pid, signal.SIGKILL)
        wait_for(lambda: supervisor.find("archiver") is None, 10, "the killed archiver to be gone")
        supervisor.start(services(settings)["archiver"])
    writer.join()
    wait_for(lambda: sum(raw_count_by_id(settings, set(ids)).values()) >= total, 120, f"{total} events in raw")
    time.sleep(3)
    counts = raw_count_by_id(settings, set(ids))
    assert set(counts) == set(ids), f"lost {len(set(ids) - set(counts))} events"
    assert max(counts.values()) == 1, f"doubled {sum(1 for c in counts.values() if c > 1)} events"


def test_archive_lag_and_counts_are_exported_as_prometheus_metrics(settings: Settings, archiver: None) -> None:
    url = f"http://127.0.0.1:{settings.archiver.metrics_port}/metrics"

    def lag_lines() -> list[str]:
        try:
            text = httpx.get(url, timeout=5).text
        except httpx.HTTPError:
            return []
        return [line for line in text.splitlines() if line.startswith("tally_archiver_lag_messages{")]

    wait_for(lambda: len(lag_lines()) == settings.kafka.pageviews_partitions + 1, 60, "a lag gauge per partition")
    wait_for(lambda: all(line.endswith(" 0.0") for line in lag_lines()), 60, "the archive to catch up (lag 0)")
    assert "tally_archiver_rows_total" in httpx.get(url, timeout=5).text
