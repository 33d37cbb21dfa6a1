"""Archive lag per Kafka partition: messages in the log that the raw tables do not hold yet.

Measured against the offsets recorded in the Delta commits (the archiver's real progress),
not against Kafka's committed group offsets.
"""

from __future__ import annotations

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from archiver.tables import ArchiveTable, raw_tables
from tally.settings import Settings


def archived_to(tables: dict[str, ArchiveTable], topic: str, partition: int) -> int:
    """The offset below which every message of (topic, partition) is archived, in either raw table:
    a poison message on pageviews goes to raw.rejected, so raw.pageviews alone would stay behind it."""
    return max(table.next_offset(topic, partition) or 0 for table in tables.values())


def archive_lag(settings: Settings, raw: dict[str, ArchiveTable] | None = None) -> dict[tuple[str, int], int]:
    """``{(topic, partition): messages not yet archived}`` for pageviews and pageviews.rejected.

    Asked on a connection of its own; ``raw`` (``raw_tables``) saves reading the tables again.
    Raises ``KafkaException`` when the broker does not answer within 10 seconds.
    """
    k = settings.kafka
    raw = raw if raw is not None else raw_tables(settings)
    consumer = Consumer({**k.client_config(), "group.id": "tally-lag-probe", "log_level": 0})
    try:
        lag = {}
        for topic in (k.pageviews_topic, k.rejected_topic):
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            for partition in sorted(partitions):
                ends = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
                if ends is None:  # no answer in time
                    raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"no watermarks for {topic} [{partition}]"))
                low, high = ends
                lag[(topic, partition)] = max(0, high - max(archived_to(raw, topic, partition), low))
        return lag
    finally:
        consumer.close()
