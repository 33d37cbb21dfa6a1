"""The commit step: a routed batch into Delta, then its offsets into Kafka.

Exactly once rests on Delta alone: each table's append carries its rows and the Kafka offsets
they cover in one atomic commit (:meth:`archiver.tables.ArchiveTable.append`). raw.rejected is
written first, then raw.pageviews (see README: exactly once). Kafka's group offsets follow, only
so that consumer lag can be monitored.
"""

from __future__ import annotations

from collections.abc import Mapping

from confluent_kafka import Consumer
from prometheus_client import Counter

from archiver.batches import RoutedBatch
from archiver.kafka import commit_offsets
from archiver.tables import ArchiveTable
from tally.tables import RAW_PAGEVIEWS, RAW_REJECTED

ARCHIVED = Counter("tally_archiver_rows_total", "Rows committed to Delta", ["table"])


class BatchCommit:
    """Commits routed batches to raw.pageviews (``raw``) and raw.rejected (``rejected``)."""

    def __init__(self, *, raw: ArchiveTable, rejected: ArchiveTable) -> None:
        self.raw, self.rejected = raw, rejected

    def to_delta(self, batch: RoutedBatch) -> None:
        """raw.rejected first, then raw.pageviews, each one commit with its offsets.

        Raises what delta-rs raises; the batch's event_ids then count as seen although they
        are not archived (see :class:`archiver.batches.BatchBuilder`).
        """
        self.rejected.append(batch.rejected)
        self.raw.append(batch.raw)

    def to_kafka(self, consumer: Consumer, next_offsets: Mapping[tuple[str, int], int], batch: RoutedBatch) -> None:
        """After Delta: Kafka's group offsets (asynchronously), and the rows counted as archived."""
        commit_offsets(consumer, next_offsets)
        ARCHIVED.labels(table=RAW_PAGEVIEWS).inc(batch.raw.count)
        ARCHIVED.labels(table=RAW_REJECTED).inc(batch.rejected.count)
