"""The Delta adapter of the archiver: raw.pageviews and raw.rejected, written with delta-rs.

Exactly once: each commit carries, per Kafka (topic, partition), the next offset to read as
a Delta *application transaction* (``txn`` action, app id ``tally-archiver:<topic>:<p>``).
Rows and offsets land in one atomic commit, so after any crash the table itself says where
to resume, and a replayed message is recognised by its offset.

Small files: each commit adds a file to every date partition it writes, and delta-rs keeps every
live file's add action and statistics in memory (17-45 KB a file with deltalake 1.6). Left
alone, the archiver's memory grows by that much a commit (45 MiB/h at 500 events/s), so it
compacts the recent partitions it wrote every :data:`REOPEN_EVERY_COMMITS` commits, and its
memory follows the table's size in large files instead. ``tally maintain`` compacts only the
older partitions (:func:`maintenance_compacts_before`): delta-rs (1.6) lets two compactions that
remove the same files both commit, which would duplicate their rows.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, Field, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError
from deltalake.transaction import CommitProperties, Transaction

from tally.log import kv
from tally.settings import Settings
from tally.storage import delta_uri, storage_options
from tally.table_schemas import RAW_LAYOUT
from tally.tables import archiver_app_id

log = logging.getLogger("tally.archiver.tables")

# A DeltaTable that commits through itself keeps growing (≈170 KB a commit, measured with
# deltalake 1.6: 130 MiB in a 30-minute soak). Reopened every this many commits, it reads the
# newest checkpoint (delta-rs writes one every 100 commits) and its memory stays bounded.
# Right before reopening, the archiver compacts the partitions it wrote meanwhile.
REOPEN_EVERY_COMMITS = 100
# The size of the files the archiver's compactions write. Each compaction rewrites a partition's
# newest compacted file together with the new small ones until it reaches this size, so this
# bounds the work a compaction does (on 2 shared cores: up to 1.8 s, against ≈ 10 s at 100 MB);
# `tally maintain` merges them into 100 MB files once the archiver is done with their date.
ARCHIVER_FILE_BYTES = 32 * 2**20
# The archiver compacts partitions of this many days back (ingest accepts events up to 7 days
# old, so late events land there); older ones are left to `tally maintain`.
ARCHIVER_COMPACTS_DAYS = 8


def utc_today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


def archiver_compacts_from(today: dt.date) -> dt.date:
    """The oldest date partition the archiver compacts on ``today``."""
    return today - dt.timedelta(days=ARCHIVER_COMPACTS_DAYS)


def maintenance_compacts_before(today: dt.date) -> dt.date:
    """``tally maintain`` compacts only partitions before this date: a day short of the
    archiver's, so that the two never rewrite the same files even when their clocks (or the
    moments they plan at) lie on either side of midnight."""
    return archiver_compacts_from(today) - dt.timedelta(days=1)


@dataclass
class TableBatch:
    """Rows bound for one table, and the next offset per (topic, partition) they cover."""

    rows: list[dict[str, object]] = field(default_factory=list)
    tables: list[pa.Table] = field(default_factory=list)  # rows already in Arrow form
    next_offsets: dict[tuple[str, int], int] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return len(self.rows) + int(sum(t.num_rows for t in self.tables))

    def add(self, row: dict[str, object], topic: str, partition: int, offset: int) -> None:
        self.rows.append(row)
        self.advance(topic, partition, offset)

    def advance(self, topic: str, partition: int, offset: int) -> None:
        """Count a message as handled by this table even though it adds no row (a duplicate)."""
        key = (topic, partition)
        self.next_offsets[key] = max(self.next_offsets.get(key, 0), offset + 1)


class DeltaWrites:
    """The two delta-rs operations an :class:`ArchiveTable` changes its table with.

    Pass a subclass as ``ArchiveTable(writes=...)`` to observe them or to make them fail as a
    lost reply or a concurrent writer would (tests/unit/test_archiver_tables.py).
    """

    def append(
        self,
        target: DeltaTable | str,
        data: pa.Table,
        *,
        partition_by: str,
        txns: list[Transaction],
        options: dict[str, str] | None,
    ) -> None:
        """Append ``data`` and the offsets ``txns`` in one commit (``target``: the loaded table, or its URI)."""
        write_deltalake(
            target,
            data,
            mode="append",
            partition_by=[partition_by],
            schema_mode="merge",  # additive evolution: new optional columns are added
            commit_properties=CommitProperties(app_transactions=txns),
            storage_options=options,
        )

    def compact(self, table: DeltaTable, *, partition_by: str, days: list[dt.date]) -> dict[str, Any]:
        """Merge the small files of these date partitions into files of :data:`ARCHIVER_FILE_BYTES`."""
        return dict(
            table.optimize.compact(
                partition_filters=[(partition_by, "in", [d.isoformat() for d in days])],
                target_size=ARCHIVER_FILE_BYTES,
                max_concurrent_tasks=1,  # one file at a time: the smallest memory peak
            )
        )


class ArchiveTable:
    """One append-only Delta table whose commits record the Kafka offsets they contain."""

    def __init__(
        self,
        uri: str,
        schema: pa.Schema,
        partition_by: str,
        *,
        options: dict[str, str] | None = None,
        today: Callable[[], dt.date] = utc_today,
        writes: DeltaWrites | None = None,
    ) -> None:
        assert pa.types.is_date32(schema.field(partition_by).type), f"{partition_by} must be a DATE partition"
        self.uri = uri
        self.options = options or None  # delta-rs storage options (object-store credentials)
        self.schema = schema
        self.partition_by = partition_by
        self.writes = writes if writes is not None else DeltaWrites()
        self._today = today
        self._table: DeltaTable | None = None
        self._commits_since_open = 0
        self._written: set[dt.date] = set()  # partitions written since their last compaction
        # The archiver is the tables' only writer, so after the first read of the Delta log
        # its own commits keep this exact; no log re-read per batch.
        self._next: dict[tuple[str, int], int | None] = {}

    @property
    def delta_table(self) -> DeltaTable | None:
        """The loaded DeltaTable that offsets are read from and commits go through (None before
        the first); a new object each time the table is reopened."""
        return self._table

    def _load(self) -> DeltaTable | None:
        if self._table is None:
            try:
                self._table = DeltaTable(self.uri, storage_options=self.options)
            except TableNotFoundError:
                return None
            self._add_new_columns(self._table)
        else:
            self._table.update_incremental()
        return self._table

    def _add_new_columns(self, table: DeltaTable) -> None:
        """Give a table written by an older Tally the schema's new columns (additive evolution) at once.

        Appends would add them too (``schema_mode="merge"``), but only with the first new event:
        until then, readers that ask for them (the views' backfill, the exact queries) would fail.
        """
        have = set(table.schema().to_arrow().names)
        missing = [f for f in self.schema if f.name not in have]
        if missing:
            table.alter.add_columns([Field.from_arrow(f) for f in missing])
            log.info("columns added", extra=kv(table=self.uri, columns=",".join(f.name for f in missing)))

    def next_offset(self, topic: str, partition: int) -> int | None:
        """The first offset of (topic, partition) not yet in this table, or None if none is."""
        key = (topic, partition)
        if key not in self._next:
            table = self._load()
            self._next[key] = None if table is None else table.transaction_version(archiver_app_id(topic, partition))
        return self._next[key]

    def append(self, batch: TableBatch) -> None:
        """Append rows and their offsets in one atomic Delta commit."""
        if not batch.count and not batch.next_offsets:
            return
        parts = [*batch.tables, pa.Table.from_pylist(batch.rows, schema=self.schema)]
        data = pa.concat_tables(parts)
        txns = [Transaction(archiver_app_id(t, p), offset) for (t, p), offset in batch.next_offsets.items()]
        try:
            self._write(data, txns)
        except CommitFailedError as e:
            # `tally maintain` deleted expired rows since this table object was loaded, and
            # delta-rs takes that for a conflict with the append, which then did not commit.
            # Reloaded, the table says so by its offsets; then the rows are written once more.
            log.warning("append conflicted, retrying", extra=kv(table=self.uri, error=str(e)))
            if any(self._reopen().transaction_version(t.app_id) != t.version for t in txns):
                self._write(data, txns)
        self._next.update(batch.next_offsets)
        self._written.update(d for d in pc.unique(data.column(self.partition_by)).to_pylist() if d is not None)
        self._commits_since_open += 1
        if self._table is None or self._commits_since_open >= REOPEN_EVERY_COMMITS:
            if self._table is not None:
                self._compact(self._table)
            self._reopen()

    def _reopen(self) -> DeltaTable:
        """Load the table afresh (from its newest checkpoint) and restart the commit count."""
        self._table = DeltaTable(self.uri, storage_options=self.options)
        self._commits_since_open = 0
        return self._table

    def _write(self, data: pa.Table, txns: list[Transaction]) -> None:
        # Writing through the loaded table object spares a replay of the Delta log per commit.
        target = self._table if self._table is not None else self.uri
        self.writes.append(target, data, partition_by=self.partition_by, txns=txns, options=self.options)

    def _compact(self, table: DeltaTable) -> None:
        """Merge the small files of the recent partitions written since their last compaction.

        Compaction only moves rows between files (``dataChange: false``); the Kafka offsets
        (``txn`` actions) are table state and stay as they are.
        """
        oldest = archiver_compacts_from(self._today())
        self._written = {d for d in self._written if d >= oldest}  # older ones: `tally maintain`
        if not self._written:
            return
        days = sorted(self._written)
        started = time.monotonic()
        try:
            metrics = self.writes.compact(table, partition_by=self.partition_by, days=days)
        except CommitFailedError as e:
            # Another writer (`tally maintain` deleting expired rows) committed meanwhile. The
            # rows are safe; the same partitions are compacted at the next reopening.
            log.warning("compaction postponed", extra=kv(table=self.uri, partitions=len(days), error=str(e)))
            return
        self._written.clear()
        log.info(
            "partitions compacted",
            extra=kv(
                table=self.uri,
                partitions=len(days),
                files_removed=metrics.get("numFilesRemoved", 0),
                files_added=metrics.get("numFilesAdded", 0),
                seconds=round(time.monotonic() - started, 2),
            ),
        )


def raw_tables(settings: Settings) -> dict[str, ArchiveTable]:
    """raw.pageviews and raw.rejected of the configured warehouse, by table name."""
    options = storage_options(settings)
    return {
        name: ArchiveTable(delta_uri(settings, name), schema, partition_by, options=options)
        for name, (schema, partition_by) in RAW_LAYOUT.items()
    }
