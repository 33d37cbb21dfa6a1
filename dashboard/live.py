"""The live figures: the realtime visitors, the KPIs and the time series, with how old their newest data is.

When the range ends today they are a fragment that reruns alone every ``dashboard.refresh_seconds``
(the rest of the page does not rerun): each such rerun first asks whether the viewer may still look,
and asks the page's reports again, of the tables' new versions. Drawn by the page run, they show the
reports it asked (:mod:`dashboard.fragments` tells the two apart).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable

import pandas as pd
import streamlit as st

from dashboard import health, panels, series_chart
from dashboard.fragments import leave_unless_allowed, rerun_alone
from dashboard.questions import PageReports, PageRun, page_reports, within_memory
from dashboard.view import View
from query.aggregates import Range, Totals
from query.report import Report
from query.site_time import local_time
from tally.annotations import annotations_for
from tally.lag import describe_lag

LIVE_FIGURES = "live_figures"  # the fragment's name (dashboard.fragments.rerun_alone)
PAST_FIGURES_SECONDS = 600  # figures of days before today are kept this long (a backfill shows after it)


@st.cache_data(ttl=PAST_FIGURES_SECONDS, max_entries=256, show_spinner=False)
def past_figures(_report: Report, key: tuple[object, ...], grain: str) -> tuple[Totals, pd.DataFrame]:
    """Totals and series of a range that ended before today: computed once, not on every refresh.

    ``key`` names the range (site, dates, filters, exact or not); ``_report`` is not hashed.
    """
    return _report.totals(), _report.series(grain)


def figures(
    report: Report, view: View, days: Range, today: dt.date, grain: str, timezone: str
) -> tuple[Totals, pd.DataFrame]:
    """Totals and series of ``report``: from :func:`past_figures` when the range cannot change any more
    (``today`` and ``days`` are the site's local dates in ``timezone``)."""
    if days.end < today:
        key = (view.site, timezone, days.start, days.end, tuple(sorted(view.filters.items())), report.exact)
        return past_figures(report, key, grain)
    return report.totals(), report.series(grain)


def data_age(last: dt.datetime | None, now: dt.datetime, refresh: int, timezone: str) -> None:
    """How old the newest figures are (the newest closed minute of agg.traffic_1m), and how often they refresh."""
    age = f"newest data {describe_lag(max(now - last, dt.timedelta(0)))} old" if last else "no data today or yesterday"
    every = f" · refreshes every {refresh} s" if refresh else ""
    st.caption(f"Live: {age}{every} · as of {local_time(now, timezone):%H:%M:%S} {timezone}")


def live_figures(run: PageRun, reports: PageReports, *, allowed: Callable[[], bool] | None) -> Totals:
    """Draw the live figures of the page run's ``reports``, refreshing themselves while the range ends
    today (every refresh first asks ``allowed``); return the totals the page run drew."""
    refresh = run.settings.dashboard.refresh_seconds if run.days.live else 0
    meaning = run.sources.visitors_meaning(run.view.site, run.days.shown.start, run.days.shown.end)
    fragment = st.fragment(refreshed_headline, run_every=refresh or None)
    return fragment(run, reports, meaning, refresh, allowed)


def refreshed_headline(
    run: PageRun, reports: PageReports, meaning: str, refresh: int, allowed: Callable[[], bool] | None
) -> Totals:
    """The fragment's body: the gate's question (on every run, the page run's too), then the figures of
    the page run's reports, or on a rerun alone of the reports asked again."""
    leave_unless_allowed(allowed)
    with within_memory(run.view):
        now = dt.datetime.now(dt.UTC)
        again = rerun_alone(LIVE_FIGURES, run.run_id)
        shown = page_reports(run.sources, run.ask, run.view, run.days) if again else reports
        return headline(run, shown, now, meaning, refresh)


def headline(run: PageRun, reports: PageReports, now: dt.datetime, meaning: str, refresh: int) -> Totals:
    """The realtime visitors at ``now``, the KPIs against the previous period, the time series with its
    notes, and how old the newest data is; return the totals drawn."""
    view, days, zone = run.view, run.days, run.days.zone
    shown, before = reports.report, reports.previous
    live = panels.realtime(run.ask.agg, view.site, now)
    current, series = figures(shown, view, days.shown, days.today, days.grain, zone)
    if shown.exact and current.visits:  # a filtered report from raw events counts the open visits too, unmarked
        still_open = run.sources.open_visits(view.site, days.shown.start, days.shown.end)
        current = dataclasses.replace(current, open_visits=still_open)
    before_totals, before_series = (
        figures(before, view, days.previous, days.today, days.grain, zone) if before else (None, None)
    )
    if current.pageviews == 0 and current.events == 0:
        st.info(
            "No page views in this range yet. Start traffic with `tally traffic`, or embed the snippet shown by "
            "`tally up` in a page of this site. Views update every few seconds."
        )
    panels.kpis(current, before_totals, shown.exact, meaning, live=live)
    notes = annotations_for(run.settings, view.site, days.shown.start, days.shown.end)
    series_chart.time_series(series, before_series, days.grain, notes, timezone=zone, imported=run.imported)
    data_age(health.newest_window(run.ask, view.site, now.date()).result(), now, refresh, zone)
    return current
