"""The archiver: one Kafka consumer group that copies the log into Delta, exactly once.

Reads ``pageviews`` and ``pageviews.rejected``. Valid events go to raw.pageviews; dead
letters, and any message on ``pageviews`` that is not a decodable v1 event (a poison
message), go to raw.rejected, so no partition is ever blocked and nothing is dropped.

Offsets live in the Delta commits (see :mod:`archiver.tables`). Kafka's committed group
offsets are written too, after Delta, only so that consumer lag can be monitored.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import signal
import time
from types import FrameType
from typing import Any

import pyarrow as pa
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Message, TopicPartition
from prometheus_client import Counter, Gauge, start_http_server

from archiver.columnar import decode_batch
from archiver.dedup import SeenIds
from archiver.tables import ArchiveTable, TableBatch, raw_tables
from tally.deadletter import DeadLetter, dead_letter
from tally.log import kv
from tally.schema import decode_event
from tally.settings import Settings
from tally.storage import find_table

log = logging.getLogger("tally.archiver")

GROUP_ID = "tally-archiver"

LAG = Gauge("tally_archiver_lag_messages", "Messages in Kafka not yet in the raw tables", ["topic", "partition"])
ARCHIVED = Counter("tally_archiver_rows_total", "Rows committed to Delta", ["table"])
DUPLICATES = Counter("tally_archiver_duplicates_total", "Events dropped because their event_id was archived already")


def _utc_date(ms: int) -> dt.date:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).date()


def event_row(event: dict[str, Any], partition: int, offset: int) -> dict[str, Any]:
    """One raw.pageviews row: a decoded event's fields plus its partition date and Kafka position."""
    row = event  # decode_event returned a fresh dict: extended in place
    row["props"] = list(event["props"].items())
    row["event_date"] = _utc_date(event["event_time"])
    row["kafka_partition"] = partition
    row["kafka_offset"] = offset
    return row


def rejected_row(letter: DeadLetter, topic: str, partition: int, offset: int) -> dict[str, object]:
    """One raw.rejected row."""
    return {
        "kind": letter.kind,
        "message": letter.message,
        "status": letter.status,
        "received_at": letter.received_at,
        "errors": json.dumps(letter.errors),
        "payload": letter.payload,
        "payload_b64": letter.payload_b64,
        "payload_size": letter.payload_size,
        "truncated": letter.truncated,
        "component": f"{letter.component.get('name')}/{letter.component.get('version')}",
        "source_topic": topic,
        "rejected_date": _utc_date(letter.received_at),
        "kafka_partition": partition,
        "kafka_offset": offset,
    }


class Archiver:
    """Consume, route each message to its table, commit to Delta, then to Kafka."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        k = settings.kafka
        self.events_topic, self.rejected_topic = k.pageviews_topic, k.rejected_topic
        tables = raw_tables(settings)
        self.raw, self.rejected = tables["raw.pageviews"], tables["raw.rejected"]
        self.consumer = Consumer(
            {
                **k.client_config(),
                "group.id": GROUP_ID,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "client.id": "tally-archiver",
            }
        )
        self._stopping = False
        self._duplicates = 0
        self.seen = SeenIds(settings.archiver.dedup_days)
        loaded = self.seen.load(find_table(settings, "raw.pageviews"), _utc_date(_now_ms()))
        log.info("dedup state loaded", extra=kv(event_ids=loaded, days=settings.archiver.dedup_days))

    def _positions(self) -> list[TopicPartition]:
        """Every partition of both topics, at the offset its table's last commit recorded.

        Partitions are assigned directly rather than through a group rebalance: a restarted
        archiver resumes at once instead of waiting out the dead one's session timeout. The
        resume point comes from Delta, not from Kafka's committed offsets.
        """
        positions = []
        for topic in (self.events_topic, self.rejected_topic):
            metadata = self.consumer.list_topics(topic, timeout=30).topics[topic]
            if metadata.error is not None:
                raise RuntimeError(f"topic {topic!r} is not available ({metadata.error}); is Kafka up (tally status)?")
            table = self.raw if topic == self.events_topic else self.rejected
            for partition in sorted(metadata.partitions):
                stored = table.next_offset(topic, partition)
                offset = stored if stored is not None else OFFSET_BEGINNING
                positions.append(TopicPartition(topic, partition, offset))
                log.info("partition assigned", extra=kv(topic=topic, partition=partition, offset=offset))
        return positions

    def _floor(self, table: ArchiveTable, topic: str, partition: int) -> int:
        return table.next_offset(topic, partition) or 0

    def _admit(self, raw: TableBatch, event_id: str, date: dt.date, partition: int, offset: int) -> bool:
        """Whether an event goes into this batch: not archived before (a replay after a crash),
        and not a second copy of an event_id (a retry that reached Kafka twice)."""
        topic = self.events_topic
        if offset < self._floor(self.raw, topic, partition):
            return False
        raw.advance(topic, partition, offset)
        if self.seen.seen(event_id, date):
            self._duplicates += 1
            return False
        self.seen.add(event_id, date)
        return True

    def route(self, messages: list[Message]) -> tuple[TableBatch, TableBatch]:
        """Split messages into raw rows and rejected rows, skipping those a table already has."""
        raw, rejected = TableBatch(), TableBatch()
        self._duplicates = 0
        events: list[tuple[int, int, bytes]] = []
        for msg in messages:
            topic, partition, offset = position(msg)
            value = msg.value() or b""
            if topic == self.rejected_topic:
                if offset >= self._floor(self.rejected, topic, partition):
                    letter = _decode_dead_letter(value)
                    rejected.add(rejected_row(letter, topic, partition, offset), topic, partition, offset)
            else:
                events.append((partition, offset, value))
        partitions, offsets = [p for p, _, _ in events], [o for _, o, _ in events]
        decoded = decode_batch([v for _, _, v in events], partitions, offsets) if events else None
        if decoded is not None:  # fast path: the whole batch decoded at once
            ids, dates = decoded.column("event_id").to_pylist(), decoded.column("event_date").to_pylist()
            keep = [self._admit(raw, *row) for row in zip(ids, dates, partitions, offsets, strict=True)]
            raw.tables.append(decoded.filter(pa.array(keep, type=pa.bool_())))
        else:
            for partition, offset, value in events:
                self._route_one(raw, rejected, partition, offset, value)
        if self._duplicates:
            DUPLICATES.inc(self._duplicates)
            log.info("duplicates dropped", extra=kv(events=self._duplicates))
        return raw, rejected

    def _route_one(self, raw: TableBatch, rejected: TableBatch, partition: int, offset: int, value: bytes) -> None:
        """The message-by-message path, for batches that hold a message that is not a v1 event."""
        topic = self.events_topic
        try:
            row = event_row(decode_event(value), partition, offset)
        except (ValueError, TypeError, RecursionError) as e:  # RecursionError: JSON nested too deeply
            if offset >= self._floor(self.rejected, topic, partition):
                letter = undecodable(f"not a v1 PageViewEvent: {e}", value)
                rejected.add(rejected_row(letter, topic, partition, offset), topic, partition, offset)
            return
        if self._admit(raw, row["event_id"], row["event_date"], partition, offset):
            raw.rows.append(row)

    def archive(self, messages: list[Message]) -> int:
        """Write one batch: raw.rejected first, then raw.pageviews (see README: exactly once)."""
        raw, rejected = self.route(messages)
        try:
            self.rejected.append(rejected)
            self.raw.append(raw)
        except Exception:
            # The ids were marked seen before the commit; a failed commit must not make their
            # replay look like duplicates, so rebuild the state from the table and re-raise.
            self.seen = SeenIds(self.settings.archiver.dedup_days)
            self.seen.load(find_table(self.settings, "raw.pageviews"), _utc_date(_now_ms()))
            raise
        self.seen.forget_before(_utc_date(_now_ms()))
        offsets: dict[tuple[str, int], int] = {}
        for msg in messages:
            topic, partition, offset = position(msg)
            offsets[(topic, partition)] = offset + 1
        self.consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=True)
        ARCHIVED.labels(table="raw.pageviews").inc(raw.count)
        ARCHIVED.labels(table="raw.rejected").inc(rejected.count)
        self._export_lag()
        if raw.count or rejected.count:
            log.info("archived", extra=kv(events=raw.count, rejected=rejected.count, messages=len(messages)))
        return raw.count

    def _export_lag(self) -> None:
        """Lag per partition: Kafka's high watermark (as last fetched, no extra request) minus
        the next offset the partition's table records."""
        for tp in self.consumer.assignment():
            table = self.raw if tp.topic == self.events_topic else self.rejected
            _, high = self.consumer.get_watermark_offsets(tp, cached=True)
            if high is not None and high >= 0:
                done = table.next_offset(tp.topic, tp.partition) or 0
                LAG.labels(topic=tp.topic, partition=str(tp.partition)).set(max(0, high - done))

    def stop(self, _signum: int = 0, _frame: FrameType | None = None) -> None:
        self._stopping = True

    def run(self) -> None:
        """Consume until SIGTERM/SIGINT; each batch closes on size or time."""
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        a = self.settings.archiver
        self.consumer.assign(self._positions())
        if self.settings.archiver.metrics_port:
            start_http_server(self.settings.archiver.metrics_port, addr="127.0.0.1")
        log.info("archiver started", extra=kv(kafka=self.settings.kafka.servers, warehouse=self.settings.warehouse_uri))
        try:
            while not self._stopping:
                batch: list[Message] = []
                deadline = time.monotonic() + a.max_wait_seconds
                while len(batch) < a.max_batch and time.monotonic() < deadline and not self._stopping:
                    wanted = min(a.max_batch - len(batch), 5000)
                    for msg in self.consumer.consume(num_messages=wanted, timeout=0.2):
                        error = msg.error()
                        if error is None:
                            batch.append(msg)
                        elif error.code() != KafkaError._PARTITION_EOF:
                            log.warning("kafka error", extra=kv(error=str(error)))
                if batch:
                    self.archive(batch)
                else:
                    self._export_lag()
        finally:
            self.consumer.close()
            log.info("archiver stopped")


def position(msg: Message) -> tuple[str, int, int]:
    """(topic, partition, offset) of a consumed message (always set for consumed messages)."""
    topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
    assert topic is not None and partition is not None and offset is not None, "consumed message without position"
    return topic, partition, offset


def _now_ms() -> int:
    return int(time.time() * 1000)


def _decode_dead_letter(value: bytes) -> DeadLetter:
    try:
        return DeadLetter.from_json(value)
    except (ValueError, TypeError, RecursionError) as e:
        return undecodable(f"dead letter not decodable: {e}", value)


def undecodable(message: str, payload: bytes) -> DeadLetter:
    """The archiver's own dead letter for a message it cannot decode (kept whole for recovery)."""
    return dead_letter(
        component="tally-archiver",
        kind="undecodable_event",
        status=0,
        message=message,
        received_at=_now_ms(),
        payload=payload,
    )
