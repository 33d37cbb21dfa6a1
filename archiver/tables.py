"""The Delta adapter of the archiver: raw.pageviews and raw.rejected, written with delta-rs.

Exactly once: each commit carries, per Kafka (topic, partition), the next offset to read as
a Delta *application transaction* (``txn`` action, app id ``tally-archiver:<topic>:<p>``).
Rows and offsets land in one atomic commit, so after any crash the table itself says where
to resume, and a replayed message is recognised by its offset.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import TableNotFoundError
from deltalake.transaction import CommitProperties, Transaction

from tally.schema import FIELDS, RAW_EXTRA_FIELDS
from tally.settings import Settings
from tally.storage import delta_uri, storage_options

APP_ID_PREFIX = "tally-archiver"
# A DeltaTable that commits through itself keeps growing (≈170 KB a commit, measured with
# deltalake 1.6: 130 MiB in a 30-minute soak). Reopened every this many commits, it reads the
# newest checkpoint (delta-rs writes one every 100 commits) and its memory stays bounded.
REOPEN_EVERY_COMMITS = 100

_ARROW_TYPES: dict[str, pa.DataType] = {
    "STRING": pa.string(),
    "BIGINT": pa.int64(),
    "INT": pa.int32(),
    "BOOLEAN": pa.bool_(),
    "DATE": pa.date32(),
    "MAP<STRING,STRING>": pa.map_(pa.string(), pa.string()),
}


def raw_pageviews_schema() -> pa.Schema:
    """Arrow schema of raw.pageviews, derived from the shared event schema."""
    columns = [(name, sql) for name, (sql, _) in FIELDS.items()] + list(RAW_EXTRA_FIELDS.items())
    return pa.schema([pa.field(name, _ARROW_TYPES[sql]) for name, sql in columns])


RAW_PAGEVIEWS = raw_pageviews_schema()

RAW_REJECTED_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),
        ("message", pa.string()),
        ("status", pa.int32()),
        ("received_at", pa.int64()),
        ("errors", pa.string()),  # JSON list of {field, error}
        ("payload", pa.string()),
        ("payload_b64", pa.string()),
        ("payload_size", pa.int64()),
        ("truncated", pa.bool_()),
        ("component", pa.string()),
        ("source_topic", pa.string()),
        ("rejected_date", pa.date32()),
        ("kafka_partition", pa.int32()),
        ("kafka_offset", pa.int64()),
    ]
)


def app_id(topic: str, partition: int) -> str:
    return f"{APP_ID_PREFIX}:{topic}:{partition}"


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


class ArchiveTable:
    """One append-only Delta table whose commits record the Kafka offsets they contain."""

    def __init__(
        self, uri: str, schema: pa.Schema, partition_by: str, *, options: dict[str, str] | None = None
    ) -> None:
        self.uri = uri
        self.options = options or None  # delta-rs storage options (object-store credentials)
        self.schema = schema
        self.partition_by = partition_by
        self._table: DeltaTable | None = None
        self._commits_since_open = 0
        # The archiver is the tables' only writer, so after the first read of the Delta log
        # its own commits keep this exact; no log re-read per batch.
        self._next: dict[tuple[str, int], int | None] = {}

    def _load(self) -> DeltaTable | None:
        if self._table is None:
            try:
                self._table = DeltaTable(self.uri, storage_options=self.options)
            except TableNotFoundError:
                return None
        else:
            self._table.update_incremental()
        return self._table

    def next_offset(self, topic: str, partition: int) -> int | None:
        """The first offset of (topic, partition) not yet in this table, or None if none is."""
        key = (topic, partition)
        if key not in self._next:
            table = self._load()
            self._next[key] = None if table is None else table.transaction_version(app_id(topic, partition))
        return self._next[key]

    def append(self, batch: TableBatch) -> None:
        """Append rows and their offsets in one atomic Delta commit."""
        if not batch.count and not batch.next_offsets:
            return
        parts = [*batch.tables, pa.Table.from_pylist(batch.rows, schema=self.schema)]
        data = pa.concat_tables(parts)
        txns = [Transaction(app_id(t, p), offset) for (t, p), offset in batch.next_offsets.items()]
        # Writing through the loaded table object spares a replay of the Delta log per commit.
        write_deltalake(
            self._table if self._table is not None else self.uri,
            data,
            mode="append",
            partition_by=[self.partition_by],
            schema_mode="merge",  # additive evolution: new optional columns are added
            commit_properties=CommitProperties(app_transactions=txns),
            storage_options=self.options,
        )
        self._next.update(batch.next_offsets)
        self._commits_since_open += 1
        if self._table is None or self._commits_since_open >= REOPEN_EVERY_COMMITS:
            self._table = DeltaTable(self.uri, storage_options=self.options)
            self._commits_since_open = 0


def raw_tables(settings: Settings) -> dict[str, ArchiveTable]:
    """raw.pageviews and raw.rejected of the configured warehouse, by table name."""
    layout = {
        "raw.pageviews": (raw_pageviews_schema(), "event_date"),
        "raw.rejected": (RAW_REJECTED_SCHEMA, "rejected_date"),
    }
    options = storage_options(settings)
    return {
        name: ArchiveTable(delta_uri(settings, name), schema, partition_by, options=options)
        for name, (schema, partition_by) in layout.items()
    }
