"""Imported history on the page (``tally import``, docs/IMPORT-EXPORT.md): its days as lines of their
own in the chart, and its top tables, each marked "imported"; the sidebar's switch leaves it out.

Imported rows are never mixed into the figures built from the log: the KPIs and the top tables above
count the site's own events, and an import holds only days before the site's first event of its
own, so the two never cover the same day. The figures are the query layer's
(:mod:`query.imported`: the sums Plausible's importer and the Stats API's ``include.imports`` use).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

import pandas as pd
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


def draw(
    sources: Sources, site_id: str, start: dt.date, end: dt.date, days: Mapping[dt.date, Mapping[str, int]]
) -> None:
    """The imported history's section under the page's own tables (nothing when the range has none)."""
    if not days:
        return
    st.subheader("Imported history")
    first, last = min(days), max(days)
    st.caption(
        f"Imported (tally import): {len(days)} days from {first} to {last}, before this site's own events."
        " Its figures are the chart's lines marked “imported” and these tables, apart from the figures above,"
        " which count this site's own events. Visitors are each day's unique visitors added up. Leave it out"
        " with the sidebar's “Include imported history”."
    )
    parts = []
    for title, dimension, label in TABLES:
        frame = breakdown(sources, site_id, start, end, dimension)
        shown = frame.rename(columns={"value": label, **{c: c.capitalize() for c in frame.columns if c != "value"}})
        parts.append(table_html(f"{title} (imported)", shown, f"imported-{dimension}"))
    st.html(markup.block(markup.grid(parts)))
