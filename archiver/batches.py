"""The batch builder: one consumed batch into the rows each raw table gets, and the offsets they cover.

Skips what a table holds already (a replay after a crash, recognised by its offset) and the
second copy of an event_id (a retry that reached Kafka twice, see :mod:`archiver.dedup`).
Everything works on whole batches; nothing here is done once per event in Python.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from prometheus_client import Counter

from archiver.consumed import Consumed
from archiver.decode import decode_dead_letter, decode_events, rejected_row
from archiver.dedup import SeenIds, day_numbers, id_keys
from archiver.tables import TableBatch
from archiver.types import ArchivedOffsets
from tally.log import kv

log = logging.getLogger("tally.archiver")

DUPLICATES = Counter("tally_archiver_duplicates_total", "Events dropped because their event_id was archived already")


@dataclass
class RoutedBatch:
    """What one consumed batch adds to raw.pageviews and to raw.rejected."""

    raw: TableBatch = field(default_factory=TableBatch)
    rejected: TableBatch = field(default_factory=TableBatch)
    duplicates: int = 0  # events dropped as second copies of an event_id


class BatchBuilder:
    """Routes consumed messages to raw.pageviews or raw.rejected, skipping what is archived already.

    ``raw`` and ``rejected`` say how far each table holds the log; ``seen`` holds the event_ids
    archived within the dedup horizon. The ids of a batch count as seen once it is routed; if
    its commit fails, replace ``seen`` by one loaded from the table again.
    """

    def __init__(
        self,
        *,
        events_topic: str,
        rejected_topic: str,
        raw: ArchivedOffsets,
        rejected: ArchivedOffsets,
        seen: SeenIds,
    ) -> None:
        self.events_topic, self.rejected_topic = events_topic, rejected_topic
        self.raw, self.rejected = raw, rejected
        self.seen = seen

    def route(self, consumed: Consumed) -> RoutedBatch:
        """Split a batch into raw rows and rejected rows, skipping those a table already has."""
        batch = RoutedBatch()
        for i in consumed.dead_letters:
            partition, offset = consumed.partitions[i], consumed.offsets[i]
            if offset >= _floor(self.rejected, self.rejected_topic, partition):
                letter = decode_dead_letter(consumed.values[i])
                batch.rejected.add(rejected_row(letter, self.rejected_topic, partition, offset), *consumed.position(i))
        values, partitions, offsets = consumed.events()
        if values:
            events, poison = decode_events(values, partitions, offsets)
            topic = self.events_topic
            for bad in poison:  # a poison message becomes a raw.rejected row (unless archived before)
                if bad.offset >= _floor(self.rejected, topic, bad.partition):
                    row = rejected_row(bad.letter(), topic, bad.partition, bad.offset)
                    batch.rejected.add(row, topic, bad.partition, bad.offset)
            keep = self._admit(batch, events)
            batch.raw.tables.append(events if keep.all() else events.filter(keep))
        if batch.duplicates:
            DUPLICATES.inc(batch.duplicates)
            log.info("duplicates dropped", extra=kv(events=batch.duplicates))
        return batch

    def _admit(self, batch: RoutedBatch, events: pa.Table) -> np.ndarray:
        """Which decoded events go into this batch (a boolean mask): not archived before (a
        replay after a crash), and not a second copy of an event_id (a retry that reached
        Kafka twice). Every event not archived before counts as handled by raw.pageviews."""
        topic = self.events_topic
        partitions = events.column("kafka_partition").to_numpy()
        offsets = events.column("kafka_offset").to_numpy()
        fresh = np.ones(len(offsets), dtype=bool)
        for partition in np.unique(partitions):
            mine = partitions == partition
            fresh[mine & (offsets < _floor(self.raw, topic, int(partition)))] = False
            handled = offsets[mine & fresh]
            if len(handled):
                batch.raw.advance(topic, int(partition), int(handled.max()))
        at = np.flatnonzero(fresh)
        ids, dates = events.column("event_id"), events.column("event_date")
        if len(at) < len(offsets):
            ids, dates = ids.take(at), dates.take(at)
        keep = np.zeros(len(offsets), dtype=bool)
        keep[at] = self.seen.admit(id_keys(ids), day_numbers(dates))
        batch.duplicates += len(at) - int(keep[at].sum())
        return keep


def _floor(table: ArchivedOffsets, topic: str, partition: int) -> int:
    """The first offset of (topic, partition) that ``table`` does not hold yet."""
    return table.next_offset(topic, partition) or 0
