"""The top tables (pages, sources, devices, places) in four tabs, of which only the open one is
asked and drawn: a new browser tab draws 3 tables, not 12 (as one HTML element: :mod:`dashboard.markup`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from dashboard import markup
from dashboard.answers import AnsweredReport
from dashboard.panels import csv_button, shown_table, table_html
from tally.dimensions import NONE_VALUE


@dataclass(frozen=True)
class TopTable:
    """One top table: its title, what it asks of a report, its CSV's name and its value column's label."""

    title: str
    question: str  # "top" (events) or "top_visits" (visits)
    dimension: str
    key: str
    value_label: str
    limit: int = 10

    def read(self, report: AnsweredReport) -> pd.DataFrame:
        return report.get(self.question, self.dimension, self.limit)  # type: ignore[no-any-return]


# The tabs and their tables, in the order drawn: only the open tab's are asked (:func:`ask_open_tab`)
# and drawn (:func:`top_tables`).
TOP_TAB_KEY = "top_tab"  # the tabs' widget key: its value in session state is the open tab's label
TOP_TABS: dict[str, tuple[TopTable, ...]] = {
    "Pages": (
        TopTable("Top pages", "top", "page", "top_pages", "Page"),
        TopTable("Entry pages", "top_visits", "entry_page", "entry_pages", "Page"),
        TopTable("Exit pages", "top_visits", "exit_page", "exit_pages", "Page"),
    ),
    "Sources": (
        TopTable("Sources", "top", "source", "sources", "Source"),
        TopTable("Channels", "top", "channel", "channels", "Channel"),
        TopTable("UTM campaigns", "top", "campaign", "campaigns", "Campaign"),
    ),
    "Devices": (
        TopTable("Browsers", "top", "browser", "browsers", "Browser"),
        TopTable("Operating systems", "top", "os", "os", "OS"),
        TopTable("Devices", "top", "device", "devices", "Device"),
    ),
    "Countries": (
        TopTable("Countries", "top", "country", "countries", "Country", limit=50),
        TopTable("Regions", "top", "region", "regions", "Region", limit=50),
        TopTable("Cities", "top", "city", "cities", "City", limit=50),
    ),
}


def open_top_tab() -> str:
    """The label of the top tables' open tab (the first until another is picked)."""
    picked = st.session_state.get(TOP_TAB_KEY)
    return picked if picked in TOP_TABS else next(iter(TOP_TABS))


def ask_open_tab(report: AnsweredReport) -> None:
    """Start the open tab's questions side by side. A page run asks them ahead; a tab picked later
    (its fragment reruns alone) asks them here, from the table snapshots read then, kept under the
    versions of the page run: that tab may be a few seconds fresher than the rest of the page."""
    for t in TOP_TABS[open_top_tab()]:
        report.ask(t.question, t.dimension, t.limit)


def top_tables(report: AnsweredReport, scroll_depths: Mapping[str, int] | None = None) -> None:
    """The top tables; top pages with each page's average scroll depth (%) when pages sent one.

    Picking another tab reruns the script; the page runs this in a fragment, so only the fragment
    reruns, and asks the new tab's questions side by side."""
    tabs = st.tabs(list(TOP_TABS), key=TOP_TAB_KEY, on_change="rerun")
    ask_open_tab(report)
    for (label, tables), tab in zip(TOP_TABS.items(), tabs, strict=True):
        if not tab.open:
            continue
        with tab:
            frames = [t.read(report) for t in tables]
            if label == "Pages" and scroll_depths:  # as Plausible: beside page views (query.vitals computes it)
                frames[0] = frames[0].assign(**{"Scroll depth %": frames[0]["value"].map(scroll_depths)})
            no_cities = label == "Countries" and (frames[2]["value"] == NONE_VALUE).all()
            count = 1 if no_cities else len(tables)
            shown = [
                shown_table(frame, exact=report.exact, value_label=t.value_label)
                for t, frame in zip(tables[:count], frames[:count], strict=False)
            ]
            parts = [markup.grid(table_html(t.title, s, t.key) for t, s in zip(tables, shown, strict=False))]
            if no_cities:  # no city database: say how to get one
                parts.append(
                    markup.note("Regions and cities need a city database: set geo.city_db (docs/CONFIGURATION.md).")
                )
            st.html(markup.block(*parts))
            for column, t, s in zip(st.columns(3), tables, shown, strict=False):
                if not s.empty:
                    with column:
                        csv_button(s, t.key, t.title)
