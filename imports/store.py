"""Imports, one Delta commit each: an import is there whole or not at all, and removing one deletes
exactly its rows, in one commit too. An export of days (Plausible's) goes into ``imported.daily``;
an export of a range's totals without dates (Umami's) into ``imported.ranges``.

Nothing is counted twice: an archive imported before into the same site (the same SHA-256) is
refused; an export of days keeps only the days before the site's first event of its own
(Plausible's rule: imported history ends where the site's own begins) that no earlier import of the
site holds, and reports the days it left out. A range cannot be cut (its figures have no days): one
that reaches the site's own first day, or any day an earlier import holds, is refused whole.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from imports.plausible import Export
from imports.ranges import add_range_import
from imports.records import (
    ImportRecord,
    ImportRefused,
    first_native_day,
    held_days,
    imports,
    imports_lock,
    known_site,
    refuse_if_imported,
)
from tally.private_files import folder_lock
from tally.settings import Settings
from tally.storage import append_rows, find_table
from tally.table_schemas import IMPORTED_DAILY_SCHEMA
from tally.tables import IMPORTED_DAILY

__all__ = [
    "Added",
    "ImportRecord",
    "ImportRefused",
    "add_import",
    "add_range_import",
    "first_native_day",
    "imports",
    "remove_import",
]
_IMPORT_ID = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class Added:
    """What an import stored, and the days of the archive it left out and why."""

    record: ImportRecord
    left_out_native: int  # days on or after the site's first event of its own
    left_out_imported: int  # days an earlier import of the site holds
    first_native: dt.date | None


def add_import(settings: Settings, site_id: str, export: Export, *, origin: str, now: dt.datetime) -> Added:
    """Store an export's rows as one import of ``site_id``, the days rules above left out."""
    site = known_site(settings, site_id)
    with folder_lock(imports_lock(settings)):  # one import at a time decides what is already there
        refuse_if_imported(settings, site_id, export.file_name, export.digest)
        held = held_days(settings, site_id)
        first_native = first_native_day(settings, site_id, site.timezone)
        import_id = uuid.uuid4().hex
        parts: list[pa.Table] = []
        native_days: set[dt.date] = set()
        again_days: set[dt.date] = set()
        for name, table in export.tables.items():
            dates = table.column("date")
            # With no events of its own, no day is the site's (an imported date is never null).
            native = pc.is_null(dates) if first_native is None else pc.greater_equal(dates, pa.scalar(first_native))
            again = pc.and_(pc.is_in(dates, value_set=pa.array(sorted(held), pa.date32())), pc.invert(native))
            native_days.update(pc.filter(dates, native).to_pylist())
            again_days.update(pc.filter(dates, again).to_pylist())
            kept = table.filter(pc.invert(pc.or_(native, again)))
            parts.append(_stored(kept, site_id, import_id, origin, name, export, now))
        rows = pa.concat_tables(parts)
        if rows.num_rows == 0:
            raise ImportRefused(_nothing_left(export, site_id, first_native, len(again_days)))
        append_rows(settings, IMPORTED_DAILY, rows)
    record = next(r for r in imports(settings, site_id) if r.import_id == import_id)
    return Added(record, len(native_days), len(again_days), first_native)


def remove_import(settings: Settings, import_id: str) -> ImportRecord | None:
    """Delete one import's rows (from the table that holds them) in one commit; None when there is no such import."""
    if not _IMPORT_ID.fullmatch(import_id):
        return None
    with folder_lock(imports_lock(settings)):
        record = next((r for r in imports(settings) if r.import_id == import_id), None)
        table = find_table(settings, record.table) if record is not None else None
        if record is None or table is None:
            return None
        table.delete(f"import_id = '{import_id}'")  # the id is 32 hex digits: checked above
    return record


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
    columns: list[pa.Array | pa.ChunkedArray] = []
    for field in IMPORTED_DAILY_SCHEMA:
        if field.name in given:
            columns.append(pa.repeat(pa.scalar(given[field.name], field.type), n))
        elif field.name in kept.column_names:
            columns.append(kept.column(field.name).cast(field.type))
        else:
            columns.append(pa.repeat(pa.scalar("" if pa.types.is_string(field.type) else 0, field.type), n))
    return pa.Table.from_arrays(columns, schema=IMPORTED_DAILY_SCHEMA)


def _nothing_left(export: Export, site_id: str, first_native: dt.date | None, held: int) -> str:
    why = []
    if first_native is not None:
        why.append(f"{site_id}'s own events begin on {first_native}, and imported history ends before them")
    if held:
        why.append(f"{held} of its days are held by an earlier import (tally import list)")
    return f"nothing of {export.file_name} ({export.first} to {export.last}) is left to import: " + "; ".join(why)
