"""Read a whole topic with a real Kafka consumer (no group offsets), for assertions."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, TopicPartition


def read_topic(servers: str, topic: str, timeout: float = 20.0) -> list[tuple[bytes | None, bytes]]:
    """Every (key, value) in ``topic`` from the beginning up to the current end."""
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"test-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics[topic]
        partitions = [TopicPartition(topic, p, 0) for p in metadata.partitions]
        ends = {p.partition: consumer.get_watermark_offsets(p, timeout=10)[1] for p in partitions}
        pending = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        out: list[tuple[bytes | None, bytes]] = []
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition())
                continue
            out.append((msg.key(), msg.value() or b""))
            if (msg.offset() or 0) + 1 >= ends[msg.partition() or 0]:
                pending.discard(msg.partition())
        assert not pending, f"{topic}: partitions {sorted(pending)} not read to their end within {timeout}s"
        return out
    finally:
        consumer.close()
