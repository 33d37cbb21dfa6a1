"""Archive lag per Kafka partition: messages in the log that the raw tables do not hold yet.

Measured against the offsets recorded in the Delta commits (the archiver's real progress),
not against Kafka's committed group offsets.
"""

from __future__ import annotations

from confluent_kafka import Consumer, TopicPartition

from archiver.tables import raw_tables
from tally.settings import Settings


def archive_lag(settings: Settings) -> dict[tuple[str, int], int]:
    """``{(topic, partition): messages not yet archived}`` for pageviews and pageviews.rejected."""
    k = settings.kafka
    raw = raw_tables(settings)
    tables = {k.pageviews_topic: raw["raw.pageviews"], k.rejected_topic: raw["raw.rejected"]}
    consumer = Consumer({**k.client_config(), "group.id": "tally-lag-probe", "log_level": 0})
    try:
        lag = {}
        for topic, table in tables.items():
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            for partition in sorted(partitions):
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
                done = table.next_offset(topic, partition)
                lag[(topic, partition)] = max(0, high - max(done if done is not None else 0, low))
        return lag
    finally:
        consumer.close()
