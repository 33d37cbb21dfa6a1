"""Quarantine: which (table, date) partitions the last suite run or audit found wrong.

``quality.partitions`` holds one row per (table, partition date, checker), where the checker is
``suite`` (``tally check``) or ``audit`` (``tally audit``; ``audit:<site>`` for a one-site audit).
Each run overwrites the rows it covers (a Delta MERGE), so a partition stays quarantined until
the checker that flagged it passes it again, typically after ``tally backfill`` of that date.
The dashboard reads it with :func:`quarantined`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa

from quality.store import open_table, retry_on_conflict
from tally.settings import Settings
from tally.storage import append_rows

PARTITIONS = "quality.partitions"

PARTITIONS_SCHEMA = pa.schema(
    [
        ("table_name", pa.string()),
        ("partition_date", pa.date32()),
        ("checker", pa.string()),
        ("quarantined", pa.bool_()),
        ("run_id", pa.string()),
        ("checked_at", pa.timestamp("us", tz="UTC")),
        ("failed_checks", pa.string()),  # readable, "; "-separated
    ]
)


@dataclass(frozen=True)
class PartitionStatus:
    """The verdict of one checker on one partition of one table."""

    table: str
    partition_date: dt.date
    checker: str
    quarantined: bool
    run_id: str
    checked_at: dt.datetime
    failed_checks: tuple[str, ...] = ()


def record_statuses(settings: Settings, statuses: Sequence[PartitionStatus]) -> None:
    """Upsert verdicts into ``quality.partitions`` by (table, date, checker)."""
    if not statuses:
        return
    data = pa.Table.from_pylist(
        [
            {
                "table_name": s.table,
                "partition_date": s.partition_date,
                "checker": s.checker,
                "quarantined": s.quarantined,
                "run_id": s.run_id,
                "checked_at": s.checked_at,
                "failed_checks": "; ".join(s.failed_checks),
            }
            for s in statuses
        ],
        schema=PARTITIONS_SCHEMA,
    )

    def upsert() -> None:
        table = open_table(settings, PARTITIONS)
        if table is None:
            append_rows(settings, PARTITIONS, data)
            return
        keys = ("table_name", "partition_date", "checker")
        (
            table.merge(data, " AND ".join(f"t.{k} = s.{k}" for k in keys), source_alias="s", target_alias="t")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )

    retry_on_conflict(upsert)


def statuses(settings: Settings) -> list[PartitionStatus]:
    """Every recorded verdict, newest check first."""
    table = open_table(settings, PARTITIONS)
    if table is None:
        return []
    rows = table.to_pyarrow_table().to_pylist()
    found = [
        PartitionStatus(
            table=r["table_name"],
            partition_date=r["partition_date"],
            checker=r["checker"],
            quarantined=r["quarantined"],
            run_id=r["run_id"],
            checked_at=r["checked_at"],
            failed_checks=tuple(c for c in (r["failed_checks"] or "").split("; ") if c),
        )
        for r in rows
    ]
    return sorted(found, key=lambda s: (s.checked_at, s.table, s.partition_date), reverse=True)


def quarantined(settings: Settings) -> list[PartitionStatus]:
    """Partitions some checker currently flags, newest first: what the dashboard marks as untrusted.

    ``{(s.table, s.partition_date) for s in quarantined(settings)}`` is the set to look up.
    """
    return [s for s in statuses(settings) if s.quarantined]
