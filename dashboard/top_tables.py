"""The top tables (pages, sources, devices, places) in four tabs, of which only the open one is
asked and drawn: a new browser tab draws 3 tables, not 12."""

from __future__ import annotations

from collections.abc import Mapping

import streamlit as st

from dashboard.answers import AnsweredReport
from dashboard.panels import table
from query.report import Report
from tally.dimensions import NONE_VALUE

# The top tables' tabs and what each asks of a report, as (question, dimension, limit), in the order
# drawn. Only the open tab's are asked (:func:`ask_open_tab`) and drawn (:func:`top_tables`).
TOP_TAB_KEY = "top_tab"  # the tabs' widget key: its value in session state is the open tab's label
TOP_TABS: dict[str, tuple[tuple[str, str, int], ...]] = {
    "Pages": (("top", "page", 10), ("top_visits", "entry_page", 10), ("top_visits", "exit_page", 10)),
    "Sources": tuple(("top", d, 10) for d in ("source", "channel", "campaign")),
    "Devices": tuple(("top", d, 10) for d in ("browser", "os", "device")),
    "Countries": tuple(("top", d, 50) for d in ("country", "region", "city")),
}


def open_top_tab() -> str:
    """The label of the top tables' open tab (the first until another is picked)."""
    picked = st.session_state.get(TOP_TAB_KEY)
    return picked if picked in TOP_TABS else next(iter(TOP_TABS))


def ask_open_tab(report: AnsweredReport) -> None:
    """Start the open tab's questions side by side. A page run asks them ahead; a tab picked later
    (its fragment reruns alone) asks them here, from the table snapshots read then, kept under the
    versions of the page run: that tab may be a few seconds fresher than the rest of the page."""
    for question, dimension, limit in TOP_TABS[open_top_tab()]:
        report.ask(question, dimension, limit)


def top_tables(report: AnsweredReport, scroll_depths: Mapping[str, int] | None = None) -> None:
    """The top tables; top pages with each page's average scroll depth (%) when pages sent one.

    Picking another tab reruns the script; the page runs this in a fragment, so only the fragment
    reruns, and asks the new tab's questions side by side."""
    pages, sources, devices, countries = st.tabs(list(TOP_TABS), key=TOP_TAB_KEY, on_change="rerun")
    ask_open_tab(report)
    exact = report.exact
    if pages.open:
        with pages:
            _top_pages(report, scroll_depths, exact=exact)
    if sources.open:
        with sources:
            _top_sources(report, exact=exact)
    if devices.open:
        with devices:
            _top_devices(report, exact=exact)
    if countries.open:
        with countries:
            _top_places(report, exact=exact)


def _top_pages(report: Report, scroll_depths: Mapping[str, int] | None, *, exact: bool) -> None:
    left, mid, right = st.columns(3)
    top_pages = report.top("page")
    if scroll_depths:  # as Plausible: beside page views (query.vitals computes it)
        top_pages = top_pages.assign(**{"Scroll depth %": top_pages["value"].map(scroll_depths)})
    with left:
        table("Top pages", top_pages, "top_pages", exact=exact, value_label="Page")
    with mid:
        table("Entry pages", report.top_visits("entry_page"), "entry_pages", exact=exact, value_label="Page")
    with right:
        table("Exit pages", report.top_visits("exit_page"), "exit_pages", exact=exact, value_label="Page")


def _top_sources(report: Report, *, exact: bool) -> None:
    left, mid, right = st.columns(3)
    with left:
        table("Sources", report.top("source"), "sources", exact=exact, value_label="Source")
    with mid:
        table("Channels", report.top("channel"), "channels", exact=exact, value_label="Channel")
    with right:
        table("UTM campaigns", report.top("campaign"), "campaigns", exact=exact, value_label="Campaign")


def _top_devices(report: Report, *, exact: bool) -> None:
    left, mid, right = st.columns(3)
    with left:
        table("Browsers", report.top("browser"), "browsers", exact=exact, value_label="Browser")
    with mid:
        table("Operating systems", report.top("os"), "os", exact=exact, value_label="OS")
    with right:
        table("Devices", report.top("device"), "devices", exact=exact, value_label="Device")


def _top_places(report: Report, *, exact: bool) -> None:
    left, mid, right = st.columns(3)
    with left:
        table("Countries", report.top("country", limit=50), "countries", exact=exact, value_label="Country")
    regions, cities = report.top("region", limit=50), report.top("city", limit=50)
    if (cities["value"] == NONE_VALUE).all():  # no city database: say how to get one
        st.caption("Regions and cities need a city database: set `geo.city_db` (docs/CONFIGURATION.md).")
        return
    with mid:
        table("Regions", regions, "regions", exact=exact, value_label="Region")
    with right:
        table("Cities", cities, "cities", exact=exact, value_label="City")
