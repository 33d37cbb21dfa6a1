"""The archiver: exactly once into raw.pageviews under kill -9, duplicates and poison messages."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pyarrow.compute as pc
from confluent_kafka import Consumer, Producer
from deltalake import DeltaTable
from prometheus_client import REGISTRY

from archiver.consumer import Archiver
from archiver.lag import LagGauges, archive_lag
from archiver.tables import raw_tables
from ops.processes import Supervisor
from ops.stack import services
from tally.schema import PageViewEvent
from tally.settings import Settings
from tests.events import page_view
from tests.integration.conftest import wait_for
from tests.integration.views_support import isolated_settings


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


def test_a_consumer_that_stops_fetching_is_replaced_and_resumes_from_the_offsets_in_delta(
    settings: Settings, kafka: str, tmp_path: Path
) -> None:
    """The stall watch: a consumer that fetches nothing while Kafka holds unarchived messages (here
    paused; in CI once, librdkafka never reconnected after a broker restart) is replaced, and its
    successor archives every event exactly once. A caught-up, idle archiver keeps its consumer."""
    iso = isolated_settings(settings, tmp_path)
    iso = dataclasses.replace(iso, archiver=dataclasses.replace(iso.archiver, stall_seconds=1.0, metrics_port=0))
    site = iso.sites[0].site_id
    before, after = [page_view(site) for _ in range(30)], [page_view(site) for _ in range(30)]
    producer = Producer({"bootstrap.servers": iso.kafka.servers, "enable.idempotence": True})

    def send(events: list[PageViewEvent]) -> None:
        for e in events:
            producer.produce(iso.kafka.pageviews_topic, key=e.visitor_id.encode(), value=e.to_json())
        assert producer.flush(30) == 0

    def replaced() -> float:
        return REGISTRY.get_sample_value("tally_archiver_consumer_replaced_total") or 0.0

    def archived(events: list[PageViewEvent]) -> Counter[str]:
        return raw_count_by_id(iso, {e.event_id for e in events})

    def topic_ready() -> bool:
        found = producer.list_topics(iso.kafka.pageviews_topic, timeout=5).topics[iso.kafka.pageviews_topic]
        return found.error is None and len(found.partitions) == iso.kafka.pageviews_partitions

    wait_for(topic_ready, 30, "the new topic in the broker's metadata")

    class PausingLagGauges(LagGauges):
        """The archiver's lag export, which also pauses its consumer when asked, on the archiver's
        own thread (librdkafka's pause from another thread can block while that thread is in consume())."""

        stall = threading.Event()

        def export(self, consumer: Consumer) -> None:  # called on every pass that fetched nothing
            if self.stall.is_set():
                self.stall.clear()
                consumer.pause(consumer.assignment())  # fetches nothing from now on
            super().export(consumer)

    tables = raw_tables(iso)
    lag = PausingLagGauges(tables)
    archiver, start = Archiver(iso, tables=tables, lag=lag), replaced()
    outcome: dict[str, Any] = {}

    def fault() -> None:  # runs beside archiver.run(), which must own the main thread (signal handlers)
        try:
            send(before)
            wait_for(lambda: sum(archived(before).values()) == len(before), 60, "the first events in raw")
            time.sleep(8)  # idle and caught up: every check finds nothing behind
            outcome["idle"] = replaced() - start
            lag.stall.set()
            wait_for(lambda: not lag.stall.is_set(), 30, "the archiver to pause its consumer")
            send(after)
            wait_for(lambda: sum(archived(after).values()) == len(after), 60, "the later events, by a new consumer")
            # A poison message last in its partition goes to raw.rejected: no lag, so no stall either.
            producer.produce(iso.kafka.pageviews_topic, value=b"not a v1 event", partition=0)
            assert producer.flush(30) == 0
            wait_for(lambda: sum(archive_lag(iso).values()) == 0, 30, "no lag behind a trailing poison message")
            replaced_before = replaced()
            time.sleep(8)  # a stall check or two; nothing archived twice by a later batch either
            outcome["after poison"] = replaced() - replaced_before
        except BaseException as e:
            outcome["error"] = e
        finally:
            archiver.stop()

    helper = threading.Thread(target=fault, daemon=True)
    helper.start()
    try:
        archiver.run()
    finally:
        archiver.stop()
        helper.join(150)
    if "error" in outcome:
        raise outcome["error"]
    assert outcome["idle"] == 0, "a caught-up archiver replaced its consumer"
    assert replaced() - start >= 1
    assert outcome["after poison"] == 0, "a trailing poison message made the archiver replace its consumer"
    counts = archived(before + after)
    assert set(counts) == {e.event_id for e in before + after}, "events lost"
    assert max(counts.values()) == 1, "events archived twice"
