"""The Kafka side of the archiver: its consumer, where it resumes, how a batch is fetched.

Partitions are assigned directly rather than through a group rebalance, at the offsets the raw
tables record (:mod:`archiver.tables`), not at Kafka's committed offsets. Those are committed
too, after Delta, only so that consumer lag can be monitored.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from archiver.types import ArchivedOffsets
from tally.log import kv
from tally.settings import Settings

log = logging.getLogger("tally.archiver")

GROUP_ID = "tally-archiver"
# Messages asked for by one consume call; a batch takes several.
CONSUME_AT_MOST = 5000


def new_consumer(settings: Settings) -> Consumer:
    """A consumer of the archiver's group, not assigned yet (raises ``KafkaException`` on bad client properties)."""
    return Consumer(
        {
            **settings.kafka.client_config(),
            "group.id": GROUP_ID,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "client.id": "tally-archiver",
        }
    )


def positions(consumer: Consumer, tables: Mapping[str, ArchivedOffsets]) -> list[TopicPartition]:
    """Every partition of each topic, at the offset its table's last commit recorded.

    ``tables`` maps each topic to the table that archives it. Assigned directly, a restarted
    archiver resumes at once instead of waiting out the dead one's session timeout.
    """
    found = []
    for topic, table in tables.items():
        metadata = consumer.list_topics(topic, timeout=30).topics[topic]
        if metadata.error is not None:
            raise RuntimeError(f"topic {topic!r} is not available ({metadata.error}); is Kafka up (tally status)?")
        for partition in sorted(metadata.partitions):
            stored = table.next_offset(topic, partition)
            offset = stored if stored is not None else OFFSET_BEGINNING
            found.append(TopicPartition(topic, partition, offset))
            log.info("partition assigned", extra=kv(topic=topic, partition=partition, offset=offset))
    return found


def assigned_consumer(settings: Settings, tables: Mapping[str, ArchivedOffsets]) -> Consumer:
    """A new consumer, assigned at the offsets in the raw tables (see :func:`positions`).

    Raises ``KafkaException`` or ``RuntimeError`` when Kafka does not tell the topics' partitions;
    the half-made consumer is then closed on a thread of its own.
    """
    fresh = new_consumer(settings)
    try:
        fresh.assign(positions(fresh, tables))
    except (KafkaException, RuntimeError):
        threading.Thread(target=fresh.close, daemon=True).start()
        raise
    return fresh


def close_aside(consumer: Consumer) -> None:
    """Close a consumer on a thread of its own: close() of a stuck consumer may never return."""
    threading.Thread(target=consumer.close, daemon=True, name="close-stalled-consumer").start()


def next_batch(
    consumer: Consumer, *, max_batch: int, max_wait_seconds: float, stopping: Callable[[], bool]
) -> list[Message]:
    """Fetch messages until there are ``max_batch``, ``max_wait_seconds`` have passed, or ``stopping()``.

    Errors among the messages are logged and left out.
    """
    batch: list[Message] = []
    deadline = time.monotonic() + max_wait_seconds
    while len(batch) < max_batch and time.monotonic() < deadline and not stopping():
        wanted = min(max_batch - len(batch), CONSUME_AT_MOST)
        messages = consumer.consume(num_messages=wanted, timeout=0.2)
        good = [msg for msg in messages if msg.error() is None]
        if len(good) < len(messages):
            log_errors(messages)
        batch.extend(good)
    return batch


def commit_offsets(consumer: Consumer, next_offsets: Mapping[tuple[str, int], int]) -> None:
    """Commit Kafka's group offsets, asynchronously: only for monitoring, the raw tables hold the real ones."""
    offsets = [TopicPartition(t, p, o) for (t, p), o in next_offsets.items()]
    consumer.commit(offsets=offsets, asynchronous=True)


def log_errors(messages: list[Message]) -> None:
    """Log the errors a consume call returned among its messages (end of partition is no error)."""
    for msg in messages:
        error = msg.error()
        if error is not None and error.code() != KafkaError._PARTITION_EOF:
            log.warning("kafka error", extra=kv(error=str(error)))
