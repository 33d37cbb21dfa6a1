"""Quarantine: which (table, date) partitions the last suite run or audit found wrong.

``quality.partitions`` holds one row per (table, partition date, checker), where the checker is
``suite`` (``tally check``) or ``audit`` (``tally audit``; ``audit:<site>`` for a one-site audit).
Each run overwrites the rows it covers (a Delta MERGE), so a partition stays quarantined until
the checker that flagged it passes it again, typically after ``tally backfill`` of that date.
The dashboard reads it with :func:`tally.quarantine.quarantined`.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from tally.quarantine import PartitionStatus
from tally.settings import Settings
from tally.storage import append_rows, find_table, retry_on_conflict
from tally.table_schemas import QUALITY_PARTITIONS_SCHEMA
from tally.tables import QUALITY_PARTITIONS


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
        schema=QUALITY_PARTITIONS_SCHEMA,
    )

    def upsert() -> None:
        table = find_table(settings, QUALITY_PARTITIONS)
        if table is None:
            append_rows(settings, QUALITY_PARTITIONS, data)
            return
        keys = ("table_name", "partition_date", "checker")
        (
            table.merge(data, " AND ".join(f"t.{k} = s.{k}" for k in keys), source_alias="s", target_alias="t")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )

    retry_on_conflict(upsert)
