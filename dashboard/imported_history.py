"""Imported history on the page (``tally import``, docs/IMPORT-EXPORT.md): its days as lines of their
own in the chart, and its top tables, each marked "imported"; the sidebar's switch leaves it out.

Imported rows are never mixed into the figures built from the log: the KPIs and the top tables above
count the site's own events, and an import holds only days before the site's first event of its
own, so the two never cover the same day. The figures are the query layer's
(:mod:`query.imported`: the sums Plausible's importer and the Stats API's ``include.imports`` use).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping

import pandas as pd
import pyarrow as pa
import streamlit as st

from dashboard import markup
from dashboard.panels import table_html
from query import imported
from query.sources import Sources

# The tables shown, in order: (title, API dimension, its column's label); each is one export table (query.imported).
TABLES = (
    ("Top pages", "event:page", "Page"),
    ("Top sources", "visit:source", "Source"),
    ("Entry pages", "visit:entry_page", "Entry page"),
    ("Exit pages", "visit:exit_page", "Exit page"),
    ("Countries", "visit:country", "Country"),
    ("Devices", "visit:device", "Device"),
    ("Browsers", "visit:browser", "Browser"),
    ("Operating systems", "visit:os", "Operating system"),
    ("Custom events", "event:name", "Event"),
)
ROWS = 10  # per table, as the page's own top tables


def daily(sources: Sources, site_id: str, start: dt.date, end: dt.date) -> dict[dt.date, dict[str, int]]:
    """Each imported day's page views and visitors (the ``visitors`` table), by local date."""
    return {
        dt.date.fromisoformat(day): {"pageviews": sums["pageviews"], "visitors": sums["visitors"]}
        for day, sums in imported.totals("time:day", sources.imported(site_id, start, end, "visitors")).items()
    }


def breakdown(sources: Sources, site_id: str, start: dt.date, end: dt.date, dimension: str) -> pd.DataFrame:
    """One imported table's top rows over the range: value, visitors, visits (or events), page views."""
    table, _ = imported.DIMENSION_TABLES[dimension]
    sums = imported.totals(dimension, sources.imported(site_id, start, end, table))
    events = dimension == "event:name"
    rows = [
        {
            "value": value,
            "visitors": s["visitors"],
            **({"events": s["events"]} if events else {"visits": s["visits"], "pageviews": s["pageviews"]}),
        }
        for value, s in sums.items()
    ]
    frame = pd.DataFrame(rows, columns=["value", "visitors", *(("events",) if events else ("visits", "pageviews"))])
    return frame.sort_values(["visitors", "value"], ascending=[False, True]).head(ROWS).reset_index(drop=True)


def range_breakdown(rows: pa.Table, dimension: str) -> pd.DataFrame:
    """A range import's top rows of one dimension: value, visitors (events, for custom events)."""
    figure = "events" if dimension == "event:name" else "visitors"
    sums = imported.range_totals(dimension, rows)
    frame = pd.DataFrame([{"value": v, figure: s[figure]} for v, s in sums.items()], columns=["value", figure])
    return frame.sort_values([figure, "value"], ascending=[False, True]).head(ROWS).reset_index(drop=True)


def draw(
    sources: Sources, site_id: str, start: dt.date, end: dt.date, days: Mapping[dt.date, Mapping[str, int]]
) -> None:
    """The imported history's section under the page's own tables (nothing when the range has none)."""
    ranges = imported.whole_ranges(start, end, sources.imported_ranges(site_id, start, end))
    if not days and ranges.num_rows == 0:
        return
    st.subheader("Imported history")
    if days:
        _draw_days(sources, site_id, start, end, days)
    if ranges.num_rows:
        _draw_ranges(ranges)


def _draw_ranges(ranges: pa.Table) -> None:
    """Range imports (Umami's export: each value's figure over its whole range, no days)."""
    spans = sorted({(r["first_date"], r["last_date"]) for r in ranges.select(["first_date", "last_date"]).to_pylist()})
    st.caption(
        "Imported ranges (tally import umami): "
        + ", ".join(f"{a} to {b}" for a, b in spans)
        + ". Umami's export holds each value's visitors over the whole range (custom events: their count), the"
        " top 500, with no days: they are in no chart or figure above. Values are as Umami names them."
    )
    _grid(
        (f"{title} (imported range)", label, f"imported-range-{dimension}", range_breakdown(ranges, dimension))
        for title, dimension, label in TABLES
        if dimension in imported.RANGE_TABLES
    )


def _draw_days(
    sources: Sources, site_id: str, start: dt.date, end: dt.date, days: Mapping[dt.date, Mapping[str, int]]
) -> None:
    """Daily imports (Plausible's export): their tables over the range."""
    first, last = min(days), max(days)
    st.caption(
        f"Imported (tally import): {len(days)} days from {first} to {last}, before this site's own events."
        " Its figures are the chart's lines marked “imported” and these tables, apart from the figures above,"
        " which count this site's own events. Visitors are each day's unique visitors added up. Leave it out"
        " with the sidebar's “Include imported history”."
    )
    _grid(
        (f"{title} (imported)", label, f"imported-{dimension}", breakdown(sources, site_id, start, end, dimension))
        for title, dimension, label in TABLES
    )


def _grid(tables: Iterable[tuple[str, str, str, pd.DataFrame]]) -> None:
    """Tables side by side: (title, the value column's label, the table's name, its rows)."""
    parts = []
    for title, label, key, frame in tables:
        named = frame.rename(columns={"value": label, **{c: c.capitalize() for c in frame if c != "value"}})
        parts.append(table_html(title, named, key))
    st.html(markup.block(markup.grid(parts)))
