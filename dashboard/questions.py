"""What one page run asks, started all at once before the first panel is drawn (``dashboard/page.py``).

The report the page shows (the views, or raw events when filtered), the previous period's, the raw
drill-down, the vitals, the views' custom properties, the quarantine list and the data-health
figures are started side by side in the page's threads (:mod:`dashboard.answers`); each panel then
waits only for its own. Every question of a page run goes through its one
:class:`query.sources.Sources`, and every range is of the site's own days (:class:`SiteDays`).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NamedTuple

import duckdb
import streamlit as st

from dashboard import health, panels, top_tables
from dashboard.answers import AnsweredReport, AnsweredVitals, Asker, filters_key
from dashboard.fragments import new_page_run
from dashboard.health import HealthFigures
from dashboard.view import View
from query.aggregates import Range
from query.raw import RawQuery
from query.raw_events import MEMORY_LIMIT
from query.site_time import local_today
from query.sources import NO_SITE, Sources
from tally.log import kv
from tally.quarantine import PartitionStatus, quarantined
from tally.settings import Settings
from tally.tables import QUALITY_PARTITIONS

log = logging.getLogger("tally.dashboard")


@dataclass(frozen=True)
class SiteDays:
    """The site's local days of one page run (``query/site_time.py`` does the arithmetic)."""

    zone: str  # the IANA zone the site's days are counted in (sites[].timezone)
    today: dt.date
    shown: Range  # the view's range
    previous: Range  # the period of the same length just before it, for comparison
    grain: str  # of the time series: "hour" up to two days, else "day"

    @property
    def live(self) -> bool:
        """Whether the range ends today, so that its figures still change."""
        return self.shown.end >= self.today


def site_days(sources: Sources, view: View, now: dt.datetime) -> SiteDays:
    """The view's ranges as the site's local dates at ``now``."""
    zone = sources.timezone(view.site)
    today = local_today(zone, now)
    return SiteDays(zone, today, Range(*view.dates(today)), Range(*view.previous(today)), view.grain(today))


@dataclass(frozen=True)
class PageRun:
    """One page run: what it reads through (its settings, its one :class:`Sources` and its :class:`Asker`),
    the view it shows, when it started, and the site's days then; ``run_id`` tells its fragments' first
    runs from their reruns alone (:func:`dashboard.fragments.rerun_alone`)."""

    settings: Settings
    sources: Sources
    ask: Asker
    view: View
    now: dt.datetime
    days: SiteDays
    # Imported history's page views and visitors by local date in the range (none when left out or filtered).
    imported: Mapping[dt.date, Mapping[str, int]] = field(default_factory=dict)
    run_id: str = field(default_factory=new_page_run)


class PageReports(NamedTuple):
    """The report the page shows (the views, or raw events when filtered), the previous period's (None
    without comparison) and the raw drill-down (None before any raw event, and when neither the
    filters nor a funnel need it)."""

    report: AnsweredReport
    previous: AnsweredReport | None
    raw: AnsweredReport | None


def raw_report(sources: Sources, view: View, days: Range) -> RawQuery | None:
    """A drill-down over raw events of the site's local days, or None before the archiver has written anything."""
    return sources.raw(view.site, days, view.filters)


def drill_down(sources: Sources, ask: Asker, view: View, days: Range) -> AnsweredReport | None:
    """:func:`raw_report` answered through the cache, under the version of raw.pageviews it reads."""
    raw = raw_report(sources, view, days)
    if raw is None:
        return None
    source = ("raw", view.site, days.start, days.end, raw.timezone, filters_key(view.filters))
    return ask.report(raw, source)


def views_report(sources: Sources, ask: Asker, site_id: str, days: Range) -> AnsweredReport:
    """The aggregate views' report of a site's local days, answered through the cache."""
    zone = sources.timezone(site_id)
    return ask.report(
        sources.views_report(site_id, days.start, days.end), ("views", site_id, days.start, days.end, zone)
    )


def nothing_report(sources: Sources, ask: Asker, days: Range) -> AnsweredReport:
    """The report of a page nothing matches (filters before any raw event), answered through the cache
    as the views' report of :data:`query.sources.NO_SITE` is: empty figures, in the shapes a site's have."""
    source = ("views", NO_SITE, days.start, days.end, sources.timezone(NO_SITE))
    return ask.report(sources.nothing_matches(days), source)


def page_reports(sources: Sources, ask: Asker, view: View, days: SiteDays) -> PageReports:
    """The page's reports (:class:`PageReports`); a filtered page before any raw event gets :func:`nothing_report`."""
    raw = drill_down(sources, ask, view, days.shown) if view.filtered or len(view.funnel) >= 2 else None
    if view.filtered:
        if raw is None:
            return PageReports(nothing_report(sources, ask, days.shown), None, None)
        previous = drill_down(sources, ask, view, days.previous) if view.compare else None
        return PageReports(raw, previous, raw)
    previous = views_report(sources, ask, view.site, days.previous) if view.compare else None
    return PageReports(views_report(sources, ask, view.site, days.shown), previous, raw)


@dataclass(frozen=True)
class Questions:
    """Every figure one page run shows, started; each is waited for where it is drawn."""

    reports: PageReports
    vitals: AnsweredVitals
    views: AnsweredReport  # the views' report even on a filtered page: custom properties read agg.props_1d
    quarantine: Future[list[PartitionStatus]]  # the quarantined partitions (tally check / tally audit)
    data_health: HealthFigures


def ask_questions(run: PageRun, *, every_site: bool) -> Questions:
    """Start every figure of the page, side by side, in the order the panels draw them."""
    view, days, ask = run.view, run.days.shown, run.ask
    reports = page_reports(run.sources, ask, view, run.days)
    vitals = ask.vitals(
        run.sources.vitals(view.site, days.start, days.end, view.filters),
        ("vitals", view.site, days.start, days.end, run.days.zone, filters_key(view.filters)),
    )
    views = views_report(run.sources, ask, view.site, days)
    panels.ask_ahead(reports.report, reports.previous, vitals, views, reports.raw, view, run.days.grain)
    top_tables.ask_open_tab(reports.report)
    statuses = ask.value(("quarantined",), (QUALITY_PARTITIONS,), lambda: quarantined(run.settings))
    checks = health.start(ask, run.settings, view.site, days, run.now, every_site=every_site)
    return Questions(reports, vitals, views, statuses, checks)


TOO_MANY_EVENTS = (
    "This filtered range holds more raw events than one question may sessionise in memory"
    f" (query.raw_events.MEMORY_LIMIT, {MEMORY_LIMIT}). Pick a shorter range, or remove the filters: unfiltered"
    " figures come from the aggregate views, which have no such limit."
)


@contextmanager
def within_memory(view: View) -> Iterator[None]:
    """Say what to do when a filtered page's raw events do not fit the memory one question may take
    (DuckDB refuses past ``MEMORY_LIMIT``; measured: a 90-day page of 10M events), instead of a
    traceback; the rest of the page is not drawn."""
    try:
        yield
    except duckdb.OutOfMemoryException:
        log.warning(
            "a filtered page's raw events did not fit in memory",
            extra=kv(site=view.site, filters=",".join(view.filters), limit=MEMORY_LIMIT),
            exc_info=True,
        )
        st.error(TOO_MANY_EVENTS)
        st.stop()
