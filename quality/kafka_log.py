"""Read a bounded slice of the ``pageviews`` topic for the audit (confluent-kafka, no group offsets).

The slice, per partition: from the first offset whose message time is at or after ``since``
(Kafka's ``offsets_for_times``; the log's start if retention removed older messages) up to the
high watermark taken when the scan starts. Messages produced during the audit are not read, so
the scan ends. Each message is decoded as the archiver decodes it (``tally.schema.decode_event``),
so the audit sees the same event_ids and the same undecodable messages. The whole slice is held
in memory (five small columns a message): for a one-day audit, about a day and a quarter of
traffic. Reading gives up after ``quality.audit_read_timeout_seconds``.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid

import pandas as pd
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tally.schema import decode_event
from tally.settings import Settings


class KafkaReadError(Exception):
    """The topic could not be read (whole); the message says what to do."""


def _decoded(value: bytes | None) -> tuple[str | None, dt.date | None, str | None]:
    """(event_id, event date, site_id) of a v1 event; all None for a message the archiver rejects."""
    try:
        event = decode_event(value or b"")
    except (TypeError, ValueError):
        return None, None, None
    day = dt.datetime.fromtimestamp(event["event_time"] / 1000, tz=dt.UTC).date()
    return event["event_id"], day, event["site_id"]


def _ranges(consumer: Consumer, topic: str, since: dt.datetime) -> dict[int, tuple[int, int]]:
    metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
    if metadata is None or metadata.error is not None:
        raise KafkaReadError(f"topic {topic!r} is not available ({metadata and metadata.error}); is Kafka up?")
    since_ms = int(since.timestamp() * 1000)
    wanted = [TopicPartition(topic, p, since_ms) for p in sorted(metadata.partitions)]
    ranges = {}
    for found in consumer.offsets_for_times(wanted, timeout=10):
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, found.partition), timeout=10)
        # -1: no message at or after `since` in this partition, so nothing to read.
        first = high if found.offset < 0 else max(found.offset, low)
        ranges[found.partition] = (first, high)
    return ranges


def scan_topic(settings: Settings, *, since: dt.datetime) -> tuple[dict[int, tuple[int, int]], pd.DataFrame]:
    """Offsets read per partition ([first, end)), and one row per message read:
    partition, offset, event_id, event_date, site_id (the last three null if not a v1 event)."""
    topic = settings.kafka.pageviews_topic
    consumer = Consumer(
        {
            **settings.kafka.client_config(),
            "group.id": f"tally-audit-{uuid.uuid4().hex[:8]}",  # never committed: the audit moves no offsets
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "client.id": "tally-audit",
        }
    )
    try:
        ranges = _ranges(consumer, topic, since)
        pending = {p for p, (first, end) in ranges.items() if first < end}
        consumer.assign([TopicPartition(topic, p, ranges[p][0]) for p in sorted(pending)])
        columns: dict[str, list[object]] = {k: [] for k in ("partition", "offset", "event_id", "event_date", "site_id")}
        timeout = settings.quality.audit_read_timeout_seconds
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise KafkaReadError(
                    f"could not read {topic} to its end offsets within {timeout:.0f}s ({len(columns['offset']):,}"
                    " messages read): audit fewer dates or raise quality.audit_read_timeout_seconds"
                )
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                partition, offset, error = msg.partition(), msg.offset(), msg.error()
                assert partition is not None, "consumed message without a partition"
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise KafkaReadError(f"reading {topic} partition {partition} failed: {error}")
                    pending.discard(partition)  # the end of the log: nothing more to read
                    continue
                assert offset is not None, "consumed message without an offset"
                end = ranges[partition][1]
                if offset >= end:
                    pending.discard(partition)
                    continue
                event_id, day, site_id = _decoded(msg.value())
                for name, value in zip(columns, (partition, offset, event_id, day, site_id), strict=True):
                    columns[name].append(value)
                if offset + 1 >= end:
                    pending.discard(partition)
    except KafkaException as e:
        raise KafkaReadError(f"Kafka at {settings.kafka.servers} did not answer ({e}); is it up (tally status)?") from e
    finally:
        consumer.close()
    messages = pd.DataFrame(columns).astype({"partition": "int64", "offset": "int64"})
    return ranges, messages
