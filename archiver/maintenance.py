"""Keeping the raw tables healthy and lawful: compaction, VACUUM, retention, forgetting a visitor.

All with delta-rs on the raw tables the archiver writes. Deletes are new Delta versions;
VACUUM then removes the files that held the deleted rows, so the data is really gone.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from dataclasses import dataclass
from typing import Any

from deltalake import DeltaTable

from archiver.tables import maintenance_compacts_before, utc_today
from tally.log import kv
from tally.settings import Settings
from tally.storage import find_table
from tally.table_schemas import RAW_LAYOUT
from tally.tables import RAW_PAGEVIEWS, RAW_REJECTED

log = logging.getLogger("tally.archiver.maintenance")

RAW_TABLES = {name: partition_by for name, (_, partition_by) in RAW_LAYOUT.items()}


def _open(settings: Settings, name: str) -> DeltaTable | None:
    return find_table(settings, name)


def _literal(text: str) -> str:
    """A SQL string literal; ids are hex or site names, anything else is refused outright."""
    if not re.fullmatch(r"[A-Za-z0-9._:-]{1,253}", text):
        raise ValueError(f"{text!r} is not a valid site or visitor id")
    return f"'{text}'"


@dataclass(frozen=True)
class MaintenanceReport:
    table: str
    files_compacted: int
    files_vacuumed: int
    rows_expired: int


def retention_of(name: str, *, retention_days: int, rejected_retention_days: int) -> int:
    """Days a raw table keeps its rows (0 = forever). raw.rejected keeps its own retention, or the
    general one when that is shorter: dead letters are never kept longer than the events."""
    if name != RAW_REJECTED:
        return retention_days
    kept = [days for days in (retention_days, rejected_retention_days) if days > 0]
    return min(kept, default=0)


def maintain(
    settings: Settings, *, vacuum_hours: int, retention_days: int, rejected_retention_days: int | None = None
) -> list[MaintenanceReport]:
    """Compact small files (of the partitions the archiver no longer compacts), drop rows past
    retention (``retention_days``; for raw.rejected, ``rejected_retention_days``, by default
    ``archiver.rejected_retention_days``; 0 = keep forever), VACUUM old files."""
    if rejected_retention_days is None:
        rejected_retention_days = settings.archiver.rejected_retention_days
    reports = []
    today = utc_today()
    for name, date_column in RAW_TABLES.items():
        table = _open(settings, name)
        if table is None:
            continue
        expired = 0
        days = retention_of(name, retention_days=retention_days, rejected_retention_days=rejected_retention_days)
        if days > 0:
            cutoff = today - dt.timedelta(days=days)
            expired = int(table.delete(f"{date_column} < '{cutoff.isoformat()}'").get("num_deleted_rows", 0))
        compacted = compact_older_partitions(table, date_column, today)
        vacuumed = table.vacuum(retention_hours=vacuum_hours, dry_run=False, enforce_retention_duration=False)
        report = MaintenanceReport(name, int(compacted.get("numFilesRemoved", 0)), len(vacuumed), expired)
        log.info("table maintained", extra=kv(**report.__dict__))
        reports.append(report)
    return reports


def compact_older_partitions(table: DeltaTable, date_column: str, today: dt.date) -> dict[str, Any]:
    """Compact the partitions the archiver no longer compacts itself (optimize metrics).

    The recent ones are the archiver's: two concurrent compactions of the same files both
    commit with delta-rs 1.6 and duplicate their rows, so the two must never overlap.
    """
    before = maintenance_compacts_before(today)
    return dict(table.optimize.compact(partition_filters=[(date_column, "<", before.isoformat())]))


@dataclass(frozen=True)
class ForgetReport:
    rows_deleted: dict[str, int]
    files_removed: dict[str, int]
    visitor_dates: tuple[dt.date, ...] = ()  # dates that held the visitor's events: views to rebuild


def forget(settings: Settings, *, site_id: str | None, visitor_id: str | None, before: dt.date | None) -> ForgetReport:
    """Delete a visitor's events (or everything before a date, or a site's) and VACUUM the files away now.

    A site's events (``site_id`` without ``visitor_id``) are deleted from ``raw.pageviews`` only:
    dead letters in ``raw.rejected`` carry the site inside their payload, not as a column, and
    expire after ``archiver.rejected_retention_days``. :func:`forget_site_views` deletes the
    site's view rows.
    """
    assert visitor_id or before or site_id, "forget needs a visitor, a site or a date"
    deleted, removed = {}, {}
    dates: list[dt.date] = []
    for name, date_column in RAW_TABLES.items():
        clauses = []
        if before is not None:
            clauses.append(f"{date_column} < '{before.isoformat()}'")
        if visitor_id is not None:
            if name == RAW_REJECTED:
                continue  # dead letters hold raw beacons, which carry no visitor id
            clauses.append(f"visitor_id = {_literal(visitor_id)}")
        if site_id is not None:
            if name == RAW_REJECTED:
                continue  # not another site's dead letters: see the docstring
            clauses.append(f"site_id = {_literal(site_id)}")
        table = _open(settings, name)
        if table is None:
            continue
        if visitor_id is not None and name == RAW_PAGEVIEWS:
            dates = _dates_where(table, " AND ".join(clauses))
        metrics = table.delete(" AND ".join(clauses))
        deleted[name] = int(metrics.get("num_deleted_rows", 0))
        # Retention 0: the files that held the rows go now, not after the usual 7 days.
        removed[name] = vacuum_now(settings, name)
    log.info("forgotten", extra=kv(site=site_id, visitor=visitor_id, before=str(before), rows=deleted))
    return ForgetReport(deleted, removed, tuple(dates))


def forget_site_views(settings: Settings, site_id: str, views: tuple[str, ...]) -> ForgetReport:
    """Delete every row of ``site_id`` from the named views (each has a ``site_id`` column) and
    VACUUM the files away now; the views' writers must be paused."""
    deleted, removed = {}, {}
    for name in views:
        table = _open(settings, name)
        if table is None:
            continue
        metrics = table.delete(f"site_id = {_literal(site_id)}")
        deleted[name] = int(metrics.get("num_deleted_rows", 0))
        removed[name] = vacuum_now(settings, name)
    log.info("site forgotten from the views", extra=kv(site=site_id, rows=deleted))
    return ForgetReport(deleted, removed)


def _dates_where(table: DeltaTable, predicate: str) -> list[dt.date]:
    """The distinct event dates of the rows a predicate matches (delta-rs SQL)."""
    from deltalake import QueryBuilder

    found = QueryBuilder().register("t", table).execute(f"SELECT DISTINCT event_date FROM t WHERE {predicate}")
    return sorted(d for batch in found for d in batch.column(0).to_pylist() if d is not None)


def vacuum_now(settings: Settings, name: str) -> int:
    """VACUUM a table with zero retention (its writers must be paused); files removed."""
    table = _open(settings, name)
    if table is None:
        return 0
    return len(table.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False))
