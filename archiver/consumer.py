"""The archiver: one Kafka consumer group that copies the log into Delta, exactly once.

Reads ``pageviews`` and ``pageviews.rejected``. Valid events go to raw.pageviews; dead
letters, and any message on ``pageviews`` that is not a decodable v1 event (a poison
message), go to raw.rejected, so no partition is ever blocked and nothing is dropped.

Offsets live in the Delta commits (see :mod:`archiver.tables`). Kafka's committed group
offsets are written too, after Delta, only so that consumer lag can be monitored.
"""

from __future__ import annotations

import datetime as dt
import faulthandler
import json
import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import numpy as np
import pyarrow as pa
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition
from prometheus_client import Counter, Gauge, start_http_server

from archiver.columnar import decode_batch
from archiver.consumed import Consumed
from archiver.dedup import SeenIds, day_numbers, id_keys
from archiver.lag import archive_lag, archived_to
from archiver.tables import RAW_PAGEVIEWS, ArchiveTable, TableBatch, raw_tables
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
REPLACED = Counter(
    "tally_archiver_consumer_replaced_total", "Kafka consumers replaced because they stopped fetching (see StallWatch)"
)


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
        self.tables = raw_tables(settings)
        self.raw, self.rejected = self.tables["raw.pageviews"], self.tables["raw.rejected"]
        self.consumer = self._new_consumer()
        self._stopping = False
        self._duplicates = 0
        self.seen = SeenIds(settings.archiver.dedup_days)
        loaded = self.seen.load(find_table(settings, "raw.pageviews"), _utc_date(_now_ms()))
        log.info("dedup state loaded", extra=kv(event_ids=loaded, days=settings.archiver.dedup_days))

    def _new_consumer(self) -> Consumer:
        return Consumer(
            {
                **self.settings.kafka.client_config(),
                "group.id": GROUP_ID,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "client.id": "tally-archiver",
            }
        )

    def _positions(self, consumer: Consumer) -> list[TopicPartition]:
        """Every partition of both topics, at the offset its table's last commit recorded.

        Partitions are assigned directly rather than through a group rebalance: a restarted
        archiver resumes at once instead of waiting out the dead one's session timeout. The
        resume point comes from Delta, not from Kafka's committed offsets.
        """
        positions = []
        for topic in (self.events_topic, self.rejected_topic):
            metadata = consumer.list_topics(topic, timeout=30).topics[topic]
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

    def _admit(self, raw: TableBatch, events: pa.Table) -> np.ndarray:
        """Which decoded events go into this batch (a boolean mask): not archived before (a
        replay after a crash), and not a second copy of an event_id (a retry that reached
        Kafka twice). Every event not archived before counts as handled by raw.pageviews."""
        topic = self.events_topic
        partitions = events.column("kafka_partition").to_numpy()
        offsets = events.column("kafka_offset").to_numpy()
        fresh = np.ones(len(offsets), dtype=bool)
        for partition in np.unique(partitions):
            mine = partitions == partition
            fresh[mine & (offsets < self._floor(self.raw, topic, int(partition)))] = False
            handled = offsets[mine & fresh]
            if len(handled):
                raw.advance(topic, int(partition), int(handled.max()))
        at = np.flatnonzero(fresh)
        ids, dates = events.column("event_id"), events.column("event_date")
        if len(at) < len(offsets):
            ids, dates = ids.take(at), dates.take(at)
        keep = np.zeros(len(offsets), dtype=bool)
        keep[at] = self.seen.admit(id_keys(ids), day_numbers(dates))
        self._duplicates += len(at) - int(keep[at].sum())
        return keep

    def route(self, messages: list[Message]) -> tuple[TableBatch, TableBatch]:
        """Split messages into raw rows and rejected rows, skipping those a table already has."""
        return self._route(Consumed.of(messages, self.rejected_topic))

    def _route(self, consumed: Consumed) -> tuple[TableBatch, TableBatch]:
        raw, rejected = TableBatch(), TableBatch()
        self._duplicates = 0
        for i in consumed.dead_letters:
            partition, offset = consumed.partitions[i], consumed.offsets[i]
            if offset >= self._floor(self.rejected, self.rejected_topic, partition):
                letter = _decode_dead_letter(consumed.values[i])
                rejected.add(rejected_row(letter, self.rejected_topic, partition, offset), *consumed.position(i))
        values, partitions, offsets = consumed.events()
        if values:
            # Fast path: the whole batch decoded at once; else message by message.
            events = decode_batch(values, partitions, offsets)
            if events is None:
                events = self._decode_one_by_one(rejected, values, partitions, offsets)
            keep = self._admit(raw, events)
            raw.tables.append(events if keep.all() else events.filter(keep))
        if self._duplicates:
            DUPLICATES.inc(self._duplicates)
            log.info("duplicates dropped", extra=kv(events=self._duplicates))
        return raw, rejected

    def _decode_one_by_one(
        self, rejected: TableBatch, values: list[bytes], partitions: list[int], offsets: list[int]
    ) -> pa.Table:
        """The message-by-message path, for batches that hold a message that is not a v1 event:
        the events as raw.pageviews rows, the others into ``rejected``."""
        rows: list[tuple[dict[str, Any], bytes]] = []
        for value, partition, offset in zip(values, partitions, offsets, strict=True):
            try:
                rows.append((event_row(decode_event(value), partition, offset), value))
            except (ValueError, TypeError, RecursionError) as e:  # RecursionError: JSON nested too deeply
                self._reject_event(rejected, f"not a v1 PageViewEvent: {e}", value, partition, offset)
        try:
            return pa.Table.from_pylist([row for row, _ in rows], schema=RAW_PAGEVIEWS)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            pass  # some value does not fit its column (an INT beyond 32 bits): find which, row by row
        fitting = []
        for row, value in rows:
            try:
                fitting.append(pa.Table.from_pylist([row], schema=RAW_PAGEVIEWS))
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
                message = f"not a v1 PageViewEvent: a value does not fit raw.pageviews: {e}"
                self._reject_event(rejected, message, value, row["kafka_partition"], row["kafka_offset"])
        return pa.concat_tables([RAW_PAGEVIEWS.empty_table(), *fitting])

    def _reject_event(self, rejected: TableBatch, message: str, value: bytes, partition: int, offset: int) -> None:
        """A poison message of the events topic becomes a raw.rejected row (unless archived before)."""
        topic = self.events_topic
        if offset >= self._floor(self.rejected, topic, partition):
            letter = undecodable(message, value)
            rejected.add(rejected_row(letter, topic, partition, offset), topic, partition, offset)

    def archive(self, messages: list[Message]) -> int:
        """Write one batch: raw.rejected first, then raw.pageviews (see README: exactly once)."""
        consumed = Consumed.of(messages, self.rejected_topic)
        raw, rejected = self._route(consumed)
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
        offsets = [TopicPartition(t, p, o) for (t, p), o in consumed.next_offsets().items()]
        self.consumer.commit(offsets=offsets, asynchronous=True)
        ARCHIVED.labels(table="raw.pageviews").inc(raw.count)
        ARCHIVED.labels(table="raw.rejected").inc(rejected.count)
        self._export_lag()
        if raw.count or rejected.count:
            log.info("archived", extra=kv(events=raw.count, rejected=rejected.count, messages=len(messages)))
        return raw.count

    def _export_lag(self) -> None:
        """Lag per partition: Kafka's high watermark (as last fetched, no extra request) minus
        the next offset the raw tables record (:func:`archiver.lag.archived_to`)."""
        for tp in self.consumer.assignment():
            _, high = self.consumer.get_watermark_offsets(tp, cached=True)
            if high is not None and high >= 0:
                done = archived_to(self.tables, tp.topic, tp.partition)
                LAG.labels(topic=tp.topic, partition=str(tp.partition)).set(max(0, high - done))

    def _replace_if_stalled(self, watch: StallWatch) -> None:
        """No message for a while: ask Kafka, on a connection of its own, whether it holds messages
        the raw tables lack. Seen twice in a row, the consumer has stopped fetching, so it is
        replaced by a new one that resumes at the offsets in Delta, as a restarted archiver does:
        nothing is lost or archived twice. (Once, after a broker restart, librdkafka never
        reconnected and the archiver stood still while Kafka filled up.)"""
        try:
            behind = sum(archive_lag(self.settings, self.tables).values())
        except KafkaException as e:
            log.info("kafka unreachable, waiting", extra=kv(error=str(e)))
            behind = 0
        if not watch.behind(behind):
            return
        log.warning(
            "kafka consumer stalled, replacing it",
            extra=kv(unarchived=behind, idle_seconds=round(watch.idle()), resume="offsets in raw tables"),
        )
        fresh = self._new_consumer()
        try:
            fresh.assign(self._positions(fresh))
        except (KafkaException, RuntimeError) as e:
            log.warning("kafka consumer not replaced, retrying later", extra=kv(error=str(e)))
            threading.Thread(target=fresh.close, daemon=True).start()
            return
        stalled, self.consumer = self.consumer, fresh
        # close() of a stuck consumer may never return: not on this thread.
        threading.Thread(target=stalled.close, daemon=True, name="close-stalled-consumer").start()
        REPLACED.inc()

    def stop(self, _signum: int = 0, _frame: FrameType | None = None) -> None:
        self._stopping = True

    def run(self) -> None:
        """Consume until SIGTERM/SIGINT; each batch closes on size or time."""
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        a = self.settings.archiver
        self.consumer.assign(self._positions(self.consumer))
        watch = StallWatch(a.stall_seconds, every=max(5.0, a.stall_seconds / 4))
        if self.settings.archiver.metrics_port:
            start_http_server(self.settings.archiver.metrics_port, addr="127.0.0.1")
        log.info("archiver started", extra=kv(kafka=self.settings.kafka.servers, warehouse=self.settings.warehouse_uri))
        try:
            while not self._stopping:
                # A loop pass that takes this long is stuck somewhere: every thread's stack to the log.
                faulthandler.dump_traceback_later(max(300.0, 5 * a.stall_seconds), exit=False)
                batch: list[Message] = []
                deadline = time.monotonic() + a.max_wait_seconds
                while len(batch) < a.max_batch and time.monotonic() < deadline and not self._stopping:
                    wanted = min(a.max_batch - len(batch), 5000)
                    messages = self.consumer.consume(num_messages=wanted, timeout=0.2)
                    good = [msg for msg in messages if msg.error() is None]
                    if len(good) < len(messages):
                        _log_errors(messages)
                    batch.extend(good)
                if batch:
                    self.archive(batch)
                    watch.fetched()
                else:
                    self._export_lag()
                    if watch.due():
                        self._replace_if_stalled(watch)
        finally:
            faulthandler.cancel_dump_traceback_later()
            self.consumer.close()
            log.info("archiver stopped")


@dataclass
class StallWatch:
    """When the archiver suspects its consumer: no message for ``after`` seconds, then Kafka found
    behind the raw tables twice, at least ``every`` seconds apart, with no message in between.
    A message that arrives just before a check does not count: the second check would find it gone."""

    after: float
    every: float = 5.0
    last_message: float = field(default_factory=time.monotonic)
    last_check: float = float("-inf")  # never checked (not 0.0: the monotonic clock starts at boot)
    suspect: bool = False

    def fetched(self) -> None:
        self.last_message, self.suspect = time.monotonic(), False

    def idle(self) -> float:
        return time.monotonic() - self.last_message

    def due(self) -> bool:
        """Whether Kafka should be asked now."""
        return self.idle() >= self.after and time.monotonic() - self.last_check >= self.every

    def behind(self, unarchived: int) -> bool:
        """Record a check's answer; True when the consumer is to be replaced (and start over)."""
        self.last_check = time.monotonic()
        if not unarchived:
            self.suspect = False
            return False
        if not self.suspect:
            self.suspect = True
            return False
        self.fetched()
        return True


def _log_errors(messages: list[Message]) -> None:
    """Log the errors a consume call returned among its messages (end of partition is no error)."""
    for msg in messages:
        error = msg.error()
        if error is not None and error.code() != KafkaError._PARTITION_EOF:
            log.warning("kafka error", extra=kv(error=str(error)))


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
