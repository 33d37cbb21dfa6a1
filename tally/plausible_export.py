"""The words of Plausible's CSV export, as Plausible writes and reads it (``lib/plausible/exports.ex``,
``lib/plausible/imported/csv_importer.ex`` in plausible/analytics; docs/IMPORT-EXPORT.md).

A ZIP of ten CSV files, one per table, each named ``imported_<table>_<YYYYMMDD>_<YYYYMMDD>.csv``
(``<table>_…`` without the prefix is taken too, as Plausible's importer does): daily rows, ``date``
the site's local day, dimension values (``""`` when unknown) and whole-number metrics. Every
session metric is a count or a sum: ``visit_duration`` is the seconds of the row's visits added up,
``bounces`` the visits that bounced, ``pageviews`` in a session table the page views of those
visits; ``visitors`` is the day's unique visitors of the row (Plausible adds them across days).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

import pyarrow as pa

# Every metric column an imported row may carry (whole numbers, 0 when a table lacks it).
METRICS = (
    "visitors",
    "visits",
    "pageviews",
    "bounces",
    "visit_duration",
    "entrances",
    "exits",
    "events",
    "total_scroll_depth",
    "total_scroll_depth_visits",
    "total_time_on_page",
    "total_time_on_page_visits",
)
# Every dimension column (text, "" when unknown), but ``city``: a GeoNames id, 0 when unknown.
DIMENSIONS = (
    "source",
    "referrer",
    "utm_source",
    "utm_medium",
    "utm_campaign",
    "utm_content",
    "utm_term",
    "hostname",
    "page",
    "entry_page",
    "exit_page",
    "name",
    "link_url",
    "path",
    "country",
    "region",
    "city",
    "device",
    "browser",
    "browser_version",
    "operating_system",
    "operating_system_version",
)
NUMBER_DIMENSIONS = frozenset({"city"})


def column_type(column: str) -> pa.DataType:
    """The Arrow type of an imported column: ``date`` a day, metrics and ``city`` whole numbers, else text."""
    if column == "date":
        return pa.date32()
    if column in METRICS or column in NUMBER_DIMENSIONS:
        return pa.int64()
    return pa.string()


@dataclass(frozen=True)
class TableFormat:
    """One of the export's tables: its name (``visitors``) and its columns in Plausible's order."""

    name: str
    dimensions: tuple[str, ...]
    metrics: tuple[str, ...]
    # Columns older Plausible exports wrote that today's importer drops: skipped, not refused.
    legacy: tuple[str, ...] = ()

    @property
    def columns(self) -> tuple[str, ...]:
        return ("date", *self.dimensions, *self.metrics)

    @property
    def file_stem(self) -> str:
        return f"imported_{self.name}"


_SESSION_METRICS = ("visitors", "visits", "visit_duration", "bounces", "pageviews")
TABLES: dict[str, TableFormat] = {
    t.name: t
    for t in (
        TableFormat("visitors", (), ("visitors", "pageviews", "bounces", "visits", "visit_duration")),
        TableFormat(
            "sources",
            ("source", "referrer", "utm_source", "utm_medium", "utm_campaign", "utm_content", "utm_term"),
            ("pageviews", "visitors", "visits", "visit_duration", "bounces"),
        ),
        TableFormat(
            "pages",
            ("hostname", "page"),
            (
                "visits",
                "visitors",
                "pageviews",
                "total_scroll_depth",
                "total_scroll_depth_visits",
                "total_time_on_page",
                "total_time_on_page_visits",
            ),
            legacy=("exits", "time_on_page", "scroll_depth", "pageleave_visitors"),
        ),
        TableFormat(
            "entry_pages", ("entry_page",), ("visitors", "entrances", "visit_duration", "bounces", "pageviews")
        ),
        TableFormat("exit_pages", ("exit_page",), ("visitors", "visit_duration", "exits", "bounces", "pageviews")),
        TableFormat("custom_events", ("name", "link_url", "path"), ("visitors", "events")),
        TableFormat("locations", ("country", "region", "city"), _SESSION_METRICS),
        TableFormat("devices", ("device",), _SESSION_METRICS),
        TableFormat("browsers", ("browser", "browser_version"), _SESSION_METRICS),
        TableFormat("operating_systems", ("operating_system", "operating_system_version"), _SESSION_METRICS),
    )
}

_FILE_NAME = re.compile(r"(?:imported_)?(?P<table>[a-z_]+?)_(?P<first>\d{8})_(?P<last>\d{8})\.csv")


@dataclass(frozen=True)
class FileName:
    """What a file's name says: its table and the range of its rows."""

    table: TableFormat
    first: dt.date
    last: dt.date


class FormatError(ValueError):
    """A file that is not Plausible's export as Plausible writes it: ``where`` names the file (and
    the line and column when there is one), the message says what is wrong and what to do."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where


def file_name(name: str) -> FileName:
    """The table and range an export file's name gives; FormatError for any other name."""
    found = _FILE_NAME.fullmatch(name)
    if found is None or found["table"] not in TABLES:
        known = ", ".join(f"imported_{t}_YYYYMMDD_YYYYMMDD.csv" for t in ("visitors", "pages"))
        raise FormatError(name, f"not a file of Plausible's export (its files are named like {known}, …)")
    first, last = (_name_date(name, found[part]) for part in ("first", "last"))
    if first > last:
        raise FormatError(name, f"the range in the name ends ({last}) before it starts ({first})")
    return FileName(TABLES[found["table"]], first, last)


def _name_date(name: str, digits: str) -> dt.date:
    try:
        return dt.datetime.strptime(digits, "%Y%m%d").date()
    except ValueError:
        raise FormatError(name, f"{digits} in the name is not a date (YYYYMMDD)") from None
