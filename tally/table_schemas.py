"""Arrow schemas of the tables written outside Spark: ``raw.*`` by the archiver (delta-rs),
``quality.*`` by the checks and the audit, ``imported.*`` by ``tally import``. Readers use them
too, e.g. to give a table nothing has written yet its columns.
"""

from __future__ import annotations

import pyarrow as pa

from tally.plausible_export import DIMENSIONS, METRICS, column_type
from tally.schema import FIELDS, RAW_EXTRA_FIELDS
from tally.tables import RAW_PAGEVIEWS, RAW_REJECTED

_ARROW_TYPES: dict[str, pa.DataType] = {
    "STRING": pa.string(),
    "BIGINT": pa.int64(),
    "INT": pa.int32(),
    "BOOLEAN": pa.bool_(),
    "DOUBLE": pa.float64(),
    "DATE": pa.date32(),
    "MAP<STRING,STRING>": pa.map_(pa.string(), pa.string()),
}


def raw_pageviews_schema() -> pa.Schema:
    """Arrow schema of raw.pageviews, derived from the shared event schema."""
    columns = [(name, sql) for name, (sql, _) in FIELDS.items()] + list(RAW_EXTRA_FIELDS.items())
    return pa.schema([pa.field(name, _ARROW_TYPES[sql]) for name, sql in columns])


RAW_PAGEVIEWS_SCHEMA = raw_pageviews_schema()

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

# The raw tables: schema and DATE partition column.
RAW_LAYOUT: dict[str, tuple[pa.Schema, str]] = {
    RAW_PAGEVIEWS: (RAW_PAGEVIEWS_SCHEMA, "event_date"),
    RAW_REJECTED: (RAW_REJECTED_SCHEMA, "rejected_date"),
}

_TIMESTAMP = pa.timestamp("us", tz="UTC")
QUALITY_RESULTS_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("checked_at", _TIMESTAMP),
        ("table_name", pa.string()),
        ("partition_date", pa.date32()),
        ("suite", pa.string()),
        ("check", pa.string()),
        ("expectation", pa.string()),
        ("column", pa.string()),
        ("success", pa.bool_()),
        ("unexpected_count", pa.int64()),
        ("observed", pa.string()),
    ]
)
QUALITY_AUDITS_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("audited_at", _TIMESTAMP),
        ("date_from", pa.date32()),
        ("date_to", pa.date32()),
        ("site_id", pa.string()),
        ("check", pa.string()),
        ("subject", pa.string()),
        ("partition_date", pa.date32()),
        ("expected", pa.int64()),
        ("actual", pa.int64()),
        ("success", pa.bool_()),
        ("message", pa.string()),
        ("hint", pa.string()),
    ]
)
QUALITY_PARTITIONS_SCHEMA = pa.schema(
    [
        ("table_name", pa.string()),
        ("partition_date", pa.date32()),
        ("checker", pa.string()),
        ("quarantined", pa.bool_()),
        ("run_id", pa.string()),
        ("checked_at", _TIMESTAMP),
        ("failed_checks", pa.string()),  # readable, "; "-separated
    ]
)

# imported.daily: what the row is (site, import, which export table), its day (the site's local day,
# as the export gives it), the export's dimensions and metrics (defaults where its table lacks
# them), and where it came from.
IMPORTED_DAILY_SCHEMA = pa.schema(
    [
        ("site_id", pa.string()),
        ("import_id", pa.string()),
        ("origin", pa.string()),  # plausible, umami
        ("table_name", pa.string()),  # the export's table: visitors, sources, pages, …
        ("date", pa.date32()),
        *((column, column_type(column)) for column in DIMENSIONS),
        *((column, column_type(column)) for column in METRICS),
        ("file_name", pa.string()),
        ("file_digest", pa.string()),  # SHA-256 of the archive
        ("imported_at", _TIMESTAMP),
    ]
)

# imported.ranges: what the row is (site, import, which file of the export), the range of site-local
# days its figure covers (the range the export was asked for: the files hold no dates), the value
# and its figure: ``visitors`` (Umami's distinct sessions over the range) or, for custom events,
# ``events`` (occurrences); the other is null.
IMPORTED_RANGES_SCHEMA = pa.schema(
    [
        ("site_id", pa.string()),
        ("import_id", pa.string()),
        ("origin", pa.string()),  # umami
        ("table_name", pa.string()),  # the export's file: events, pages, referrers, browsers, os, devices, countries
        ("first_date", pa.date32()),
        ("last_date", pa.date32()),
        ("value", pa.string()),  # the file's x
        ("visitors", pa.int64()),
        ("events", pa.int64()),
        ("file_name", pa.string()),
        ("file_digest", pa.string()),  # SHA-256 of the file given to tally import
        ("imported_at", _TIMESTAMP),
    ]
)
