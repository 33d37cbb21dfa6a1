"""An export of one range's totals (Umami's: no dates, each value's figure over the range the export
was asked for) stored in ``imported.ranges``, in one Delta commit, with that range on every row.

Such figures cannot be cut at a day, so the range is refused whole, saying why, when it reaches the
site's own first day (imported history ends where the site's own begins), when any of its days is
held by an earlier import of the site (of days or of a range), or when it ends after today.
"""

from __future__ import annotations

import datetime as dt
import uuid
import zoneinfo

import pyarrow as pa

from imports.records import (
    ImportRecord,
    ImportRefused,
    first_native_day,
    imports,
    imports_lock,
    known_site,
    read,
    refuse_if_imported,
)
from imports.umami import UmamiExport
from tally.private_files import folder_lock
from tally.settings import Settings
from tally.storage import append_rows
from tally.table_schemas import IMPORTED_RANGES_SCHEMA
from tally.tables import IMPORTED_DAILY, IMPORTED_RANGES
from tally.umami_export import EVENTS_FILE


def add_range_import(
    settings: Settings,
    site_id: str,
    export: UmamiExport,
    *,
    first: dt.date,
    last: dt.date,
    origin: str,
    now: dt.datetime,
) -> ImportRecord:
    """Store ``export``'s rows as one import of ``site_id`` covering its local days ``first`` to ``last``."""
    site = known_site(settings, site_id)
    if last < first:
        raise ImportRefused(f"the range ends ({last}) before it starts ({first}); give --from first, then --to")
    today = now.astimezone(zoneinfo.ZoneInfo(site.timezone)).date()
    if last > today:
        raise ImportRefused(
            f"the range ends on {last}, after today ({today} in {site_id}'s time zone); give the range the export"
            " was asked for"
        )
    if export.rows == 0:
        raise ImportRefused(f"every file of {export.file_name} is empty: nothing to import")
    with folder_lock(imports_lock(settings)):  # one import at a time decides what is already there
        refuse_if_imported(settings, site_id, export.file_name, export.digest)
        first_native = first_native_day(settings, site_id, site.timezone)
        if first_native is not None and last >= first_native:
            raise ImportRefused(
                f"{site_id}'s own events begin on {first_native}, and {export.file_name} covers {first} to {last}:"
                " its figures have no dates, so they cannot be cut at that day; export a range that ends by"
                f" {first_native - dt.timedelta(days=1)}"
            )
        _refuse_overlap(settings, site_id, first, last)
        import_id = uuid.uuid4().hex
        append_rows(settings, IMPORTED_RANGES, _stored(export, site_id, import_id, origin, first, last, now))
    return next(r for r in imports(settings, site_id) if r.import_id == import_id)


def _refuse_overlap(settings: Settings, site_id: str, first: dt.date, last: dt.date) -> None:
    """ImportRefused when an earlier import of the site holds a day of ``first`` to ``last``."""
    days = read(settings, IMPORTED_DAILY, ["import_id", "date"], site_id)
    inside = set()
    if days is not None:
        inside = {r["import_id"] for r in days.to_pylist() if first <= r["date"] <= last}
    for record in imports(settings, site_id):
        overlaps = record.import_id in inside if record.dated else record.first <= last and first <= record.last
        if overlaps:
            raise ImportRefused(
                f"{first} to {last} overlaps import {record.import_id} of {site_id} ({record.first} to"
                f" {record.last}, {record.file_name}), whose days would be counted twice; remove it first"
                f" (tally import remove {record.import_id}) or export a range that does not overlap it"
            )


def _stored(
    export: UmamiExport, site_id: str, import_id: str, origin: str, first: dt.date, last: dt.date, now: dt.datetime
) -> pa.Table:
    """The export's rows in imported.ranges' columns: a file's figure is its values' visitors, or events."""
    parts = []
    for name, table in export.tables.items():
        n = table.num_rows
        figure, nothing = table.column("figure"), pa.nulls(n, pa.int64())
        counted = {
            "value": table.column("value"),
            "visitors": nothing if name == EVENTS_FILE else figure,
            "events": figure if name == EVENTS_FILE else nothing,
        }
        given = {
            "site_id": site_id,
            "import_id": import_id,
            "origin": origin,
            "table_name": name,
            "first_date": first,
            "last_date": last,
            "file_name": export.file_name,
            "file_digest": export.digest,
            "imported_at": now,
        }
        columns = [
            counted[f.name] if f.name in counted else pa.array([given[f.name]] * n, f.type)
            for f in IMPORTED_RANGES_SCHEMA
        ]
        parts.append(pa.Table.from_arrays(columns, schema=IMPORTED_RANGES_SCHEMA))
    return pa.concat_tables(parts)
