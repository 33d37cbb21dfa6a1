"""The small interfaces the archiver's units meet at; each is named once, here.

Tests pass in-memory fakes or wrappers for them (see tests/unit/test_archiver_*.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from confluent_kafka import Consumer

# Seconds on a monotonic clock (``time.monotonic``); the stall watch takes another in tests.
Clock = Callable[[], float]


class ArchivedOffsets(Protocol):
    """How far a raw table holds the Kafka log (:class:`archiver.tables.ArchiveTable`)."""

    def next_offset(self, topic: str, partition: int) -> int | None:
        """The first offset of (topic, partition) not yet in the table, or None if none is."""
        ...


class LagExport(Protocol):
    """Publishes the archive lag of the partitions a consumer is assigned
    (:class:`archiver.lag.LagGauges`).

    The archiver calls it on its own thread after every batch and on every loop pass that
    fetched nothing, with the consumer it reads from at that moment.
    """

    def export(self, consumer: Consumer) -> None:
        """Set the lag gauges of ``consumer``'s assigned partitions."""
        ...
