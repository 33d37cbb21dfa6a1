"""The Delta adapter of quality: read one partition of a checked table, append results, with delta-rs.

Everything here runs without a JVM. The quality tables live beside the others in the warehouse:
``quality.results`` (one row per check of a partition, partitioned by that partition's date),
``quality.audits`` (one row per comparison of an audit run) and ``quality.partitions``
(see :mod:`quality.quarantine`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from quality.contracts import Contract
from quality.findings import CheckResult
from tally.settings import Settings
from tally.storage import append_rows, find_table, read_frame, retry_on_conflict
from tally.table_schemas import QUALITY_AUDITS_SCHEMA, QUALITY_RESULTS_SCHEMA
from tally.tables import QUALITY_AUDITS, QUALITY_RESULTS


@dataclass(frozen=True)
class Partition:
    """One date partition of a table, as pandas, with the table's Delta column types."""

    frame: pd.DataFrame
    delta_types: dict[str, str]


def delta_type_name(data_type: Any) -> str:
    """Delta's name of a column type: ``long``, ``timestamp``, ``map<string,string>``, …"""
    kind = getattr(data_type, "type", None)
    if kind == "map":
        return f"map<{delta_type_name(data_type.key_type)},{delta_type_name(data_type.value_type)}>"
    return str(kind) if kind is not None else str(data_type.to_json())


def read_partition(settings: Settings, contract: Contract, day: dt.date) -> Partition | None:
    """Rows of ``day`` in the contract's table (possibly none), or None if the table does not exist."""
    table = find_table(settings, contract.table)
    if table is None:
        return None
    types = {f.name: delta_type_name(f.type) for f in table.schema().fields}
    frame = table.to_pandas(filters=[(contract.partition_by, "=", day)])
    return Partition(frame, types)


def read_rows(
    settings: Settings,
    name: str,
    columns: Sequence[str],
    *,
    start: dt.date,
    end: dt.date,
    partition_by: str = "event_date",
    equals: Mapping[str, object] | None = None,
) -> pd.DataFrame:
    """Some columns of a table's partitions ``start..end``, keeping rows whose ``equals`` columns match.

    Only the partition filter goes to the scan: files that delta-rs rewrote (an UPDATE, a MERGE)
    may store strings as another Arrow type, which pyarrow cannot compare in a scan filter.
    A table nothing has written yet reads as no rows.
    """
    equals = equals or {}
    table = find_table(settings, name)
    if table is None:
        return pd.DataFrame({column: [] for column in columns})
    wanted = list(dict.fromkeys([*columns, *equals]))
    in_dates = (pc.field(partition_by) >= start) & (pc.field(partition_by) <= end)
    frame = table.to_pyarrow_dataset().to_table(filter=in_dates, columns=wanted).to_pandas()
    for column, value in equals.items():
        frame = frame[frame[column] == value]
    return frame[list(columns)].reset_index(drop=True)


def append(settings: Settings, name: str, rows: Sequence[dict[str, Any]], schema: pa.Schema, **options: Any) -> None:
    """Append rows to a quality table with delta-rs, creating it on first use."""
    if not rows:
        return
    data = pa.Table.from_pylist(list(rows), schema=schema)
    retry_on_conflict(lambda: append_rows(settings, name, data, **options))


def append_results(settings: Settings, run_id: str, checked_at: dt.datetime, results: Sequence[CheckResult]) -> None:
    """Record a check run's results in ``quality.results``."""
    rows = [
        {
            "run_id": run_id,
            "checked_at": checked_at,
            "table_name": r.table,
            "partition_date": r.partition_date,
            "suite": r.suite,
            "check": r.check,
            "expectation": r.expectation,
            "column": r.column,
            "success": r.success,
            "unexpected_count": r.unexpected_count,
            "observed": r.observed,
        }
        for r in results
    ]
    append(settings, QUALITY_RESULTS, rows, QUALITY_RESULTS_SCHEMA, partition_by=["partition_date"])


def read_results(settings: Settings, run_id: str | None = None) -> pd.DataFrame:
    """``quality.results`` (of one run, if given) as pandas; empty if no check has run yet."""
    frame = read_frame(settings, QUALITY_RESULTS, QUALITY_RESULTS_SCHEMA)
    return frame if run_id is None else frame[frame["run_id"] == run_id]


def read_audits(settings: Settings, run_id: str | None = None) -> pd.DataFrame:
    """``quality.audits`` (of one run, if given) as pandas; empty if no audit has run yet."""
    frame = read_frame(settings, QUALITY_AUDITS, QUALITY_AUDITS_SCHEMA)
    return frame if run_id is None else frame[frame["run_id"] == run_id]
