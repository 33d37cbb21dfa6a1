"""Quarantined partitions: a table's date that a data-quality checker flags, so that readers (the
dashboard) mark its figures as untrusted. ``quality`` writes the verdicts into ``quality.partitions``;
anyone reads them here.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from tally.settings import Settings
from tally.storage import find_table
from tally.tables import QUALITY_PARTITIONS


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


def statuses(settings: Settings) -> list[PartitionStatus]:
    """Every recorded verdict, newest check first."""
    table = find_table(settings, QUALITY_PARTITIONS)
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
