"""A site's figures as Plausible's CSV export (the format: :mod:`tally.plausible_export`), computed by
the query layer's exact path (:meth:`query.exact.ExactQuery.measure`, the code that answers the
Stats API's questions from raw events), so an exported figure is the one the API gives.

Each of the ten tables is one question of the site's local days with ``time:day`` and the table's
dimensions; counts and sums are taken unrounded (bounces, the seconds of the visits) as the format
wants them. A visit is dated, and its visit dimensions are those of, its first event (Plausible
dates a session by its last). What Tally does not keep is written as the format's "unknown":
``city`` 0 (Tally's cities are names, the format's GeoNames ids), browser and OS versions, scroll
depth and time on page 0, a custom event's ``link_url`` and ``path``.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from query.exact import ExactQuery
from query.spec import Query
from tally.dimensions import NONE_VALUE
from tally.plausible_export import TABLES

_MEASURED = ("visitors", "pageviews", "events", "visits", "bounce_rate", "visit_duration", "views_per_visit")


@dataclass(frozen=True)
class TableQuery:
    """How one export table is asked: its API dimensions after ``time:day``, the export's column
    each fills, and how a measured row becomes the table's metrics."""

    dimensions: tuple[tuple[str, str], ...]  # (API dimension, export column)
    metrics: Callable[[dict[str, Any]], dict[str, int]]


def _session(m: dict[str, Any]) -> dict[str, int]:
    # A row has only the figures that found something: events but no visit begun in it (a day a visit
    # from the day before runs into) has no visit sums, a visit's row without its events none of theirs.
    return {
        "visitors": m.get("visitors", 0),
        "visits": m.get("visits", 0),
        "visit_duration": round(m.get("duration_ms", 0) / 1000),
        "bounces": m.get("bounces", 0),
        "pageviews": m.get("visit_pageviews", 0),
    }


def _entries(m: dict[str, Any]) -> dict[str, int]:
    return {**_session(m), "entrances": m.get("visits", 0)}


def _exits(m: dict[str, Any]) -> dict[str, int]:
    return {**_session(m), "exits": m.get("visits", 0)}


def _days(m: dict[str, Any]) -> dict[str, int]:
    return {**_session(m), "pageviews": m.get("pageviews", 0)}  # the day's page views, as Plausible counts them


def _pages(m: dict[str, Any]) -> dict[str, int]:
    return {"visits": m.get("visits", 0), "visitors": m.get("visitors", 0), "pageviews": m.get("pageviews", 0)}


def _events(m: dict[str, Any]) -> dict[str, int]:
    return {"visitors": m.get("visitors", 0), "events": m.get("events", 0)}


QUERIES: dict[str, TableQuery] = {
    "visitors": TableQuery((), _days),
    "sources": TableQuery(
        (
            ("visit:source", "source"),
            ("visit:referrer", "referrer"),
            *((f"visit:utm_{part}", f"utm_{part}") for part in ("source", "medium", "campaign", "content", "term")),
        ),
        _session,
    ),
    "pages": TableQuery((("event:hostname", "hostname"), ("event:page", "page")), _pages),
    "entry_pages": TableQuery((("visit:entry_page", "entry_page"),), _entries),
    "exit_pages": TableQuery((("visit:exit_page", "exit_page"),), _exits),
    "custom_events": TableQuery((("event:name", "name"),), _events),
    "locations": TableQuery((("visit:country", "country"), ("visit:region", "region")), _session),
    "devices": TableQuery((("visit:device", "device"),), _session),
    "browsers": TableQuery((("visit:browser", "browser"),), _session),
    "operating_systems": TableQuery((("visit:os", "operating_system"),), _session),
}


def export_rows(
    exact: ExactQuery, site_id: str, start: dt.date, end: dt.date, timezone: str
) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Each export table's rows (name, rows in the format's columns), one question a table."""
    for name, asked in QUERIES.items():
        query = Query(
            site_id,
            start,
            end,
            _MEASURED,
            dimensions=("time:day", *(d for d, _ in asked.dimensions)),
            timezone=timezone,
        )
        rows = []
        for measured in exact.measure(query):
            day, *values = measured["dimensions"]
            named = zip(asked.dimensions, values, strict=True)
            row = {"date": day, **{column: _unknown(value) for (_, column), value in named}}
            if name == "custom_events" and row["name"] in ("", "pageview"):
                continue  # page views are the visitors table's; the format's custom events are the rest
            if name == "locations" and not row["country"]:
                continue  # as Plausible's export: a visit of an unknown country has no location row
            row.update(asked.metrics(measured["metrics"]))
            rows.append(row)
        keys = ["date", *(column for _, column in asked.dimensions)]
        rows.sort(key=lambda r: tuple(str(r[k]) for k in keys))  # the same range exports the same bytes
        yield name, rows


def _unknown(value: Any) -> Any:
    return "" if value in (None, NONE_VALUE) else value


def write_zip(
    out: BinaryIO,
    tables: Iterator[tuple[str, list[dict[str, Any]]]],
    start: dt.date,
    end: dt.date,
    progress: Callable[[str, int], None] = lambda name, rows: None,
) -> None:
    """The ten files, named as Plausible names them, in a stored (uncompressed) ZIP, as Plausible's."""
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as archive:
        for name, rows in tables:
            fmt = TABLES[name]
            file_name = f"{fmt.file_stem}_{start:%Y%m%d}_{end:%Y%m%d}.csv"
            archive.writestr(file_name, csv_text(list(fmt.columns), rows))
            progress(file_name, len(rows))


def csv_text(columns: list[str], rows: list[dict[str, Any]]) -> str:
    """ClickHouse's CSVWithNames, as Plausible's export has it: names and text quoted, numbers bare;
    a column the row lacks is the format's default (0, or "" for text)."""
    text = io.StringIO()
    writer = csv.writer(text, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(column, row.get(column)) for column in columns])
    return text.getvalue()


def _cell(column: str, value: Any) -> Any:
    if value is None:
        return 0 if column in _NUMBERS else ""
    return value


_NUMBERS = frozenset(c for t in TABLES.values() for c in t.metrics) | {"city"}
