"""One batch of consumed Kafka messages, unpacked once into plain columns.

The archiver reads each message's topic, partition, offset and value exactly once, in list
comprehensions; routing, decoding and the offsets it commits all work on these lists.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from confluent_kafka import Message


@dataclass(frozen=True)
class Consumed:
    """Messages as columns; ``dead_letters`` are the indices of those from the dead-letter topic."""

    topics: list[str]
    partitions: list[int]
    offsets: list[int]
    values: list[bytes]
    dead_letters: list[int]

    @classmethod
    def of(cls, messages: list[Message], dead_letter_topic: str) -> Consumed:
        topics = [m.topic() for m in messages]
        partitions = [m.partition() for m in messages]
        offsets = [m.offset() for m in messages]
        values = [m.value() or b"" for m in messages]
        assert None not in topics and None not in partitions and None not in offsets, (
            "consumed message without position"
        )
        dead_letters = (
            [i for i, t in enumerate(topics) if t == dead_letter_topic] if dead_letter_topic in topics else []
        )
        return cls(topics, partitions, offsets, values, dead_letters)  # type: ignore[arg-type]  # None excluded above

    def position(self, i: int) -> tuple[str, int, int]:
        """(topic, partition, offset) of message ``i``."""
        return self.topics[i], self.partitions[i], self.offsets[i]

    def events(self) -> tuple[list[bytes], list[int], list[int]]:
        """Values, partitions and offsets of the messages that are not dead letters."""
        if not self.dead_letters:
            return self.values, self.partitions, self.offsets
        skip = set(self.dead_letters)
        keep = [i for i in range(len(self.values)) if i not in skip]
        return [self.values[i] for i in keep], [self.partitions[i] for i in keep], [self.offsets[i] for i in keep]

    def next_offsets(self) -> dict[tuple[str, int], int]:
        """Per (topic, partition): the offset after the last message of the batch."""
        partitions = np.asarray(self.partitions, dtype=np.int64)
        offsets = np.asarray(self.offsets, dtype=np.int64)
        found: dict[tuple[str, int], int] = {}
        several = len(set(self.topics)) > 1
        for topic in set(self.topics):
            mask = np.array([t == topic for t in self.topics]) if several else np.ones(len(offsets), dtype=bool)
            for partition in np.unique(partitions[mask]):
                found[(topic, int(partition))] = int(offsets[mask & (partitions == partition)].max()) + 1
        return found
