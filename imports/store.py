"""Imports kept in ``imported.daily``, one Delta commit each: an import is there whole or not at all,
and removing one deletes exactly its rows, in one commit too.

Nothing is counted twice: an archive imported before into the same site (the same SHA-256) is
refused, and an import keeps only the days before the site's first event of its own (Plausible's
rule: imported history ends where the site's own begins) that no earlier import of the site holds.
The days left out are reported, never silently dropped.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
import zoneinfo
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from imports.plausible import Export
from tally.private_files import folder_lock
from tally.settings import Settings
from tally.storage import append_rows, arrow_dataset, find_table
from tally.table_schemas import IMPORTED_DAILY_SCHEMA
from tally.tables import IMPORTED_DAILY, RAW_PAGEVIEWS

_IMPORT_ID = re.compile(r"[0-9a-f]{32}")
_RECORD_COLUMNS = ["site_id", "import_id", "origin", "table_name", "date", "file_name", "file_digest", "imported_at"]


class ImportRefused(ValueError):
    """An import that cannot be made as asked; the message says why and what to do."""


@dataclass(frozen=True)
class ImportRecord:
    """One import as ``tally import list`` shows it."""

    import_id: str
    site_id: str
    origin: str
    file_name: str
    file_digest: str
    imported_at: dt.datetime
    first: dt.date
    last: dt.date
    rows: dict[str, int]  # by export table


@dataclass(frozen=True)
class Added:
    """What an import stored, and the days of the archive it left out and why."""

    record: ImportRecord
    left_out_native: int  # days on or after the site's first event of its own
    left_out_imported: int  # days an earlier import of the site holds
    first_native: dt.date | None


def imports(settings: Settings, site_id: str | None = None) -> list[ImportRecord]:
    """Every import (of ``site_id``, if given), oldest first."""
    rows = _read(settings, _RECORD_COLUMNS, site_id)
    if rows is None or rows.num_rows == 0:
        return []
    counts: dict[str, dict[str, int]] = {}
    for r in rows.group_by(["import_id", "table_name"]).aggregate([("date", "count")]).to_pylist():
        counts.setdefault(r["import_id"], {})[r["table_name"]] = r["date_count"]
    keys = ["import_id", "site_id", "origin", "file_name", "file_digest", "imported_at"]
    found = [
        ImportRecord(**{k: r[k] for k in keys}, first=r["date_min"], last=r["date_max"], rows=counts[r["import_id"]])
        for r in rows.group_by(keys).aggregate([("date", "min"), ("date", "max")]).to_pylist()
    ]
    return sorted(found, key=lambda rec: (rec.imported_at, rec.import_id))


def add_import(settings: Settings, site_id: str, export: Export, *, origin: str, now: dt.datetime) -> Added:
    """Store an export's rows as one import of ``site_id``, the days rules above left out."""
    site = settings.site(site_id)
    if site is None:
        raise ImportRefused(f"no site {site_id!r}; add it first (tally site add) or check the name (tally site list)")
    with folder_lock(settings.home_dir / "imports"):  # one import at a time decides what is already there
        earlier = [r for r in imports(settings, site_id) if r.file_digest == export.digest]
        if earlier:
            raise ImportRefused(
                f"{export.file_name} was imported into {site_id} already (import {earlier[0].import_id}, "
                f"{earlier[0].imported_at:%Y-%m-%d %H:%M} UTC); remove it first to import it again"
            )
        held = _imported_days(settings, site_id)
        first_native = first_native_day(settings, site_id, site.timezone)
        import_id = uuid.uuid4().hex
        parts: list[pa.Table] = []
        native_days: set[dt.date] = set()
        held_days: set[dt.date] = set()
        for name, table in export.tables.items():
            dates = table.column("date")
            # With no events of its own, no day is the site's (an imported date is never null).
            native = pc.is_null(dates) if first_native is None else pc.greater_equal(dates, pa.scalar(first_native))
            again = pc.and_(pc.is_in(dates, value_set=pa.array(sorted(held), pa.date32())), pc.invert(native))
            native_days.update(pc.filter(dates, native).to_pylist())
            held_days.update(pc.filter(dates, again).to_pylist())
            kept = table.filter(pc.invert(pc.or_(native, again)))
            parts.append(_stored(kept, site_id, import_id, origin, name, export, now))
        rows = pa.concat_tables(parts)
        if rows.num_rows == 0:
            raise ImportRefused(_nothing_left(export, site_id, first_native, len(held_days)))
        append_rows(settings, IMPORTED_DAILY, rows)
    record = next(r for r in imports(settings, site_id) if r.import_id == import_id)
    return Added(record, len(native_days), len(held_days), first_native)


def remove_import(settings: Settings, import_id: str) -> ImportRecord | None:
    """Delete one import's rows in one commit; None when there is no such import."""
    if not _IMPORT_ID.fullmatch(import_id):
        return None
    with folder_lock(settings.home_dir / "imports"):
        record = next((r for r in imports(settings) if r.import_id == import_id), None)
        table = find_table(settings, IMPORTED_DAILY)
        if record is None or table is None:
            return None
        table.delete(f"import_id = '{import_id}'")  # the id is 32 hex digits: checked above
    return record


def first_native_day(settings: Settings, site_id: str, timezone: str) -> dt.date | None:
    """The site's local day of its first event in the log (raw.pageviews), None when it has none."""
    table = find_table(settings, RAW_PAGEVIEWS)
    if table is None:
        return None
    times = arrow_dataset(table).to_table(columns=["event_time"], filter=ds.field("site_id") == site_id)
    first_ms = pc.min(times.column("event_time")).as_py() if times.num_rows else None  # epoch milliseconds
    if first_ms is None:
        return None
    return dt.datetime.fromtimestamp(first_ms / 1000, zoneinfo.ZoneInfo(timezone)).date()


def _imported_days(settings: Settings, site_id: str) -> set[dt.date]:
    rows = _read(settings, ["date"], site_id)
    return set(pc.unique(rows.column("date")).to_pylist()) if rows is not None else set()


def _read(settings: Settings, columns: list[str], site_id: str | None) -> pa.Table | None:
    table = find_table(settings, IMPORTED_DAILY)
    if table is None:
        return None
    where = ds.field("site_id") == site_id if site_id is not None else None
    return arrow_dataset(table).to_table(columns=columns, filter=where)


def _stored(
    kept: pa.Table, site_id: str, import_id: str, origin: str, name: str, export: Export, now: dt.datetime
) -> pa.Table:
    """An export table's kept rows in imported.daily's columns (a column its table lacks: its default)."""
    n = kept.num_rows
    given = {
        "site_id": site_id,
        "import_id": import_id,
        "origin": origin,
        "table_name": name,
        "file_name": export.file_name,
        "file_digest": export.digest,
        "imported_at": now,
    }
    columns = []
    for field in IMPORTED_DAILY_SCHEMA:
        if field.name in given:
            columns.append(pa.array([given[field.name]] * n, field.type))
        elif field.name in kept.column_names:
            columns.append(kept.column(field.name).cast(field.type))
        else:
            columns.append(pa.array(["" if pa.types.is_string(field.type) else 0] * n, field.type))
    return pa.Table.from_arrays(columns, schema=IMPORTED_DAILY_SCHEMA)


def _nothing_left(export: Export, site_id: str, first_native: dt.date | None, held: int) -> str:
    why = []
    if first_native is not None:
        why.append(f"{site_id}'s own events begin on {first_native}, and imported history ends before them")
    if held:
        why.append(f"{held} of its days are held by an earlier import (tally import list)")
    return f"nothing of {export.file_name} ({export.first} to {export.last}) is left to import: " + "; ".join(why)
