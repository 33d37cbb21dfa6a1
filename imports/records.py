"""What is imported already, read from both tables of imports: ``imported.daily`` (an export of days,
Plausible's) and ``imported.ranges`` (an export of a range's totals, without dates: Umami's). An
import's rows are in one of them; :func:`imports` lists both, and :func:`held_days` says which days
of a site an import holds, so that no later import counts them again."""

from __future__ import annotations

import datetime as dt
import zoneinfo
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from tally.settings import Settings, SiteSettings
from tally.storage import arrow_dataset, find_table, text_is
from tally.tables import IMPORTED_DAILY, IMPORTED_RANGES, RAW_PAGEVIEWS

_KEYS = ["import_id", "site_id", "origin", "file_name", "file_digest", "imported_at"]


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
    rows: dict[str, int]  # by export table (file)
    table: str = field(default=IMPORTED_DAILY)  # the table that holds its rows

    @property
    def dated(self) -> bool:
        """Whether its rows are days (imported.daily), not one range's totals (imported.ranges)."""
        return self.table == IMPORTED_DAILY


def imports(settings: Settings, site_id: str | None = None) -> list[ImportRecord]:
    """Every import (of ``site_id``, if given), of either table, oldest first."""
    found = _daily_records(settings, site_id) + _range_records(settings, site_id)
    return sorted(found, key=lambda rec: (rec.imported_at, rec.import_id))


def known_site(settings: Settings, site_id: str) -> SiteSettings:
    """The site imported into; ImportRefused for one Tally does not know."""
    site = settings.site(site_id)
    if site is None:
        raise ImportRefused(f"no site {site_id!r}; add it first (tally site add) or check the name (tally site list)")
    return site


def imports_lock(settings: Settings) -> Path:
    """The folder locked while an import or a removal decides what is there already: one at a time."""
    return settings.home_dir / "imports"


def refuse_if_imported(settings: Settings, site_id: str, file_name: str, digest: str) -> None:
    """ImportRefused when an archive of this SHA-256 is imported into the site already."""
    earlier = [r for r in imports(settings, site_id) if r.file_digest == digest]
    if earlier:
        first = earlier[0]
        raise ImportRefused(
            f"{file_name} was imported into {site_id} already (import {first.import_id} of {first.file_name},"
            f" {first.imported_at:%Y-%m-%d %H:%M} UTC); remove it first to import it again"
        )


def held_days(settings: Settings, site_id: str) -> set[dt.date]:
    """The site's days an import holds: each day of a daily import, every day of a range import's range."""
    days: set[dt.date] = set()
    rows = read(settings, IMPORTED_DAILY, ["date"], site_id)
    if rows is not None:
        days.update(pc.unique(rows.column("date")).to_pylist())
    for record in _range_records(settings, site_id):
        span = (record.last - record.first).days + 1
        days.update(record.first + dt.timedelta(days=i) for i in range(span))
    return days


def first_native_day(settings: Settings, site_id: str, timezone: str) -> dt.date | None:
    """The site's local day of its first event in the log (raw.pageviews), None when it has none."""
    table = find_table(settings, RAW_PAGEVIEWS)
    if table is None:
        return None
    times = arrow_dataset(table).to_table(columns=["event_time"], filter=text_is("site_id", site_id))
    first_ms = pc.min(times.column("event_time")).as_py() if times.num_rows else None  # epoch milliseconds
    if first_ms is None:
        return None
    return dt.datetime.fromtimestamp(first_ms / 1000, zoneinfo.ZoneInfo(timezone)).date()


def read(settings: Settings, name: str, columns: list[str], site_id: str | None) -> pa.Table | None:
    """Columns of one table of imports (of ``site_id``, if given); None before anything wrote it."""
    table = find_table(settings, name)
    if table is None:
        return None
    where = text_is("site_id", site_id) if site_id is not None else None
    return arrow_dataset(table).to_table(columns=columns, filter=where)


def _daily_records(settings: Settings, site_id: str | None) -> list[ImportRecord]:
    rows = read(settings, IMPORTED_DAILY, [*_KEYS, "table_name", "date"], site_id)
    if rows is None or rows.num_rows == 0:
        return []
    counts = _counts(rows, "date")
    return [
        ImportRecord(**{k: r[k] for k in _KEYS}, first=r["date_min"], last=r["date_max"], rows=counts[r["import_id"]])
        for r in rows.group_by(_KEYS).aggregate([("date", "min"), ("date", "max")]).to_pylist()
    ]


def _range_records(settings: Settings, site_id: str | None) -> list[ImportRecord]:
    rows = read(settings, IMPORTED_RANGES, [*_KEYS, "table_name", "first_date", "last_date", "value"], site_id)
    if rows is None or rows.num_rows == 0:
        return []
    counts = _counts(rows, "value")
    keys = [*_KEYS, "first_date", "last_date"]
    return [
        ImportRecord(
            **{k: r[k] for k in _KEYS},
            first=r["first_date"],
            last=r["last_date"],
            rows=counts[r["import_id"]],
            table=IMPORTED_RANGES,
        )
        for r in rows.group_by(keys).aggregate([]).to_pylist()
    ]


def _counts(rows: pa.Table, column: str) -> dict[str, dict[str, int]]:
    """Each import's rows by its export's table."""
    counts: dict[str, dict[str, int]] = {}
    for r in rows.group_by(["import_id", "table_name"]).aggregate([(column, "count")]).to_pylist():
        counts.setdefault(r["import_id"], {})[r["table_name"]] = r[f"{column}_count"]
    return counts
