"""The report page for one visitor of the dashboard, once access is settled (``dashboard/app.py``)."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import duckdb
import pandas as pd
import streamlit as st

from dashboard import health, panels, series_chart, top_tables, vitals_panel
from dashboard.answers import EVERY_TABLE, AnswerCache, AnsweredReport, Asker, filters_key
from dashboard.controls import sidebar
from dashboard.view import View, ViewError, from_query, range_label, to_query
from query.aggregates import Aggregates, Range, Totals
from query.raw import RawQuery
from query.raw_events import MEMORY_LIMIT
from query.report import Report
from query.site_time import local_time, local_today
from query.sources import Sources
from tally.annotations import MAX_TEXT, AnnotationError, add_annotation, annotations_for
from tally.lag import describe_lag
from tally.log import kv
from tally.quarantine import PartitionStatus, quarantined
from tally.salt_periods import visitors_meaning
from tally.settings import Settings, load_settings
from tally.tables import (
    ACTIVE_5M,
    QUALITY_PARTITIONS,
)

log = logging.getLogger("tally.dashboard")

ANSWER_THREADS = 4  # figures computed side by side: most of a read is Arrow, delta-rs or DuckDB, outside the GIL
# The tables a page reads or keys its answers on, opened when the process starts (warm_up), so that
# the first visitor does not wait for their file lists (a second or more over a few months of minute
# rows or raw events): the answers' tables, the realtime figure's, the data-health panel's and the
# quarantine list's.
PAGE_TABLES = tuple(dict.fromkeys((*EVERY_TABLE, ACTIVE_5M.table, *health.HEALTH_TABLES, QUALITY_PARTITIONS)))


def _warehouse(settings: Settings) -> str:
    return f"{settings.warehouse_uri} {settings.warehouse!r}"  # where the tables are, and how they are reached


@st.cache_resource(show_spinner=False, hash_funcs={Settings: _warehouse})
def aggregates(settings: Settings) -> Aggregates:
    """One reader per dashboard process and warehouse (only the warehouse's settings are its key):
    table snapshots are shared by every page run."""
    return Aggregates(settings)


def warm_up() -> None:
    """Open the snapshots of :data:`PAGE_TABLES` in the page's own reader, and read the small ones kept
    in memory (``dashboard/server.py`` runs this at start-up). A table not written yet is skipped; a
    failure is logged and the warm-up goes on with the next table: the page then opens that one
    itself, as it would have without a warm-up."""
    try:
        reader = aggregates(load_settings())
    except Exception:
        log.warning("the dashboard's table reader did not start; the first page opens the tables", exc_info=True)
        return
    for name in PAGE_TABLES:
        try:
            reader.warm(name)
        except Exception:
            log.warning("warming up a table failed; the first page opens it", extra=kv(table=name), exc_info=True)


@st.cache_resource(show_spinner=False)
def answer_cache(settings: Settings) -> AnswerCache:
    """The answers kept for every page run of this process (keyed on table versions: ``dashboard/answers.py``)."""
    return AnswerCache()


@st.cache_resource(show_spinner=False)
def answer_threads() -> ThreadPoolExecutor:
    """The threads that compute a page's figures side by side, shared by every page run."""
    return ThreadPoolExecutor(max_workers=ANSWER_THREADS, thread_name_prefix="tally-answers")


def asker(settings: Settings) -> Asker:
    """This page run's questions, answered through the process's cache and threads."""
    return Asker(aggregates(settings), answer_cache(settings), answer_threads())


def raw_report(settings: Settings, view: View, days: Range) -> RawQuery | None:
    """A drill-down over raw events of the site's local days, or None before the archiver has written anything."""
    return Sources(settings, aggregates(settings)).raw(view.site, days, view.filters)


def drill_down(settings: Settings, ask: Asker, view: View, days: Range) -> AnsweredReport | None:
    """:func:`raw_report` answered through the cache, under the version of raw.pageviews it reads."""
    raw = raw_report(settings, view, days)
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


def page_reports(
    settings: Settings, ask: Asker, sources: Sources, view: View, days: Range, today: dt.date
) -> tuple[AnsweredReport, AnsweredReport | None, AnsweredReport | None]:
    """The report the page shows (the views, or raw events when filtered), the previous period's
    (None without comparison) and the raw drill-down (None before any raw event, and when neither
    the filters nor a funnel need it)."""
    raw = drill_down(settings, ask, view, days) if view.filtered or len(view.funnel) >= 2 else None
    previous_days = Range(*view.previous(today))
    if view.filtered:
        if raw is None:
            return views_report(sources, ask, "", days), None, None  # no raw rows: nothing matches
        previous = drill_down(settings, ask, view, previous_days) if view.compare else None
        return raw, previous, raw
    previous = views_report(sources, ask, view.site, previous_days) if view.compare else None
    return views_report(sources, ask, view.site, days), previous, raw


def quarantine_warning(statuses: list[PartitionStatus], site_id: str) -> None:
    """Warn about quarantined partitions that hold this site's figures.

    A one-site audit (checker ``audit:<site>``) speaks only of its own site, so another site's
    quarantine is not shown here; the suites and all-site audits judge whole partitions.
    """
    held = [q for q in statuses if q.checker == f"audit:{site_id}" or not q.checker.startswith("audit:")]
    if held:
        listed = ", ".join(f"{q.table} {q.partition_date} ({q.checker})" for q in held[:8])
        st.warning(
            f"Data-quality checks failed for {len(held)} partition(s): {listed}. Figures from those dates may be "
            "wrong; see `tally check` / `tally audit`, then `tally backfill` the dates."
        )


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


ANNOTATE_OPEN = "annotate_open"  # the annotation form's expander (its state key)


def annotate(settings: Settings, site_id: str, today: dt.date, timezone: str) -> None:
    """A form under the chart to note something on a day (``tally annotate`` does the same)."""
    box = st.expander("Annotate a day", key=ANNOTATE_OPEN, on_change="rerun")
    if not box.open:
        return  # the form is drawn only when asked for: a new tab draws one element, not four
    with box, st.form("annotate", clear_on_submit=True):
        day = st.date_input(f"Day ({timezone})", value=today, max_value=today + dt.timedelta(days=366))
        text = st.text_input("Note", max_chars=MAX_TEXT, placeholder="launched the pricing page", key="annotation_text")
        if st.form_submit_button("Add to the chart") and isinstance(day, dt.date):
            try:
                add_annotation(
                    settings, site_id=site_id, day=day, text=text, author="dashboard", now=dt.datetime.now(dt.UTC)
                )
            except AnnotationError as e:
                st.error(str(e), icon=None)
            else:
                st.rerun()


def data_age(last: dt.datetime | None, now: dt.datetime, refresh: int, timezone: str) -> None:
    """How old the newest figures are (the newest closed minute of agg.traffic_1m), and how often they refresh."""
    age = f"newest data {describe_lag(max(now - last, dt.timedelta(0)))} old" if last else "no data today or yesterday"
    every = f" · refreshes every {refresh} s" if refresh else ""
    st.caption(f"Live: {age}{every} · as of {local_time(now, timezone):%H:%M:%S} {timezone}")


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


def in_fragment(allowed: Callable[[], bool] | None, draw: Callable[[], None]) -> None:
    """Run ``draw`` as a fragment: a widget in it (a tab picked) reruns it alone. Each such rerun first
    asks ``allowed``, as the live figures do (the page run itself has just passed the gate)."""
    page_run = [True]

    @st.fragment
    def guarded_part() -> None:
        if not page_run[0] and allowed is not None and not allowed():
            st.rerun(scope="app")  # the gate shows the login form or the refusal
        page_run[0] = False
        draw()

    guarded_part()


def show(
    settings: Settings,
    sites: list[str],
    params: Mapping[str, str],
    *,
    read_only: bool,
    every_site: bool = False,
    allowed: Callable[[], bool] | None = None,
) -> View:
    """Render the whole report for the view in ``params`` (the URL, or a share link's pinned view);
    return the view shown.

    Every figure is of the view's site; ``every_site`` (a ``["*"]`` grant, never a share link)
    adds the data-health figures counted over the whole instance; without it, the narrower page.

    The realtime visitors, the KPIs and the chart of a range ending today refresh on their own
    every ``dashboard.refresh_seconds`` (a fragment: the rest of the page does not rerun). Each
    refresh first asks ``allowed`` whether the viewer may still look (a session logged out in
    another tab, or a revoked share link, reruns the whole page, which shows the login form).
    """
    now = dt.datetime.now(dt.UTC)
    try:
        view = from_query(params, default_site=sites[0])
    except ViewError as e:
        # e.problem, not str(e): the bad value is the URL's, and st.error renders Markdown.
        st.error(f"This link's view is not valid: {e.problem}. Remove the parameter or pick the view again.")
        st.stop()
    if view.site not in sites:
        st.error("You have no access to that site, or it is not configured.")
        st.stop()
    ask = asker(settings)
    sources = Sources(settings, ask.agg)
    if not read_only:
        view = sidebar(view, sites, ask, now, timezone_of=sources.timezone)
        st.sidebar.button("Refresh figures", key="refresh", help="Reads the tables again (keeps you logged in).")
        st.query_params.from_dict(to_query(view))
    # The site's days: every range below is of its local dates (query/site_time.py does the arithmetic).
    zone = sources.timezone(view.site)
    today = local_today(zone, now)
    days = Range(*view.dates(today))
    # Every figure of the page is started now, side by side; each panel below waits for its own.
    report, previous, raw = page_reports(settings, ask, sources, view, days, today)
    vitals = ask.vitals(
        sources.vitals(view.site, days.start, days.end, view.filters),
        ("vitals", view.site, days.start, days.end, zone, filters_key(view.filters)),
    )
    views = views_report(sources, ask, view.site, days)
    grain = view.grain(today)
    panels.ask_ahead(report, previous, vitals, views, raw, view, grain)
    top_tables.ask_open_tab(report)
    statuses = ask.value(("quarantined",), (QUALITY_PARTITIONS,), lambda: quarantined(settings))
    checks = health.start(ask, settings, view.site, days, now, every_site=every_site)

    st.title(f"Tally · {view.site}")
    label = range_label(view.preset, zone) if view.preset != "custom" else f"{days.start} – {days.end} ({zone})"
    st.caption(f"{label} · bots excluded" + (" · read-only shared view" if read_only else ""))
    quarantine_warning(statuses.result(), view.site)
    if view.filtered and raw is None:
        st.info("No raw events yet, so filters cannot be applied.")
        st.stop()
    if view.filtered:
        shown = ", ".join(f"{k}" for k in view.filters)
        st.info(f"Filtered by {shown}: every figure below is computed from raw events (exact drill-down).")

    refresh = settings.dashboard.refresh_seconds if days.end >= today else 0
    previous_days = Range(*view.previous(today))
    site = settings.site(view.site)
    meaning = visitors_meaning(site.salt_period if site else "day", days.start, days.end)
    first_run = [True]  # the page run's own reports; a refresh of the fragment reads the tables' new versions

    @st.fragment(run_every=refresh or None)
    def headline() -> Totals:
        if allowed is not None and not allowed():
            st.rerun(scope="app")  # the gate shows the login form or the refusal
        with within_memory(view):
            return live_figures()

    def live_figures() -> Totals:
        now = dt.datetime.now(dt.UTC)
        shown, before = (
            (report, previous) if first_run[0] else page_reports(settings, ask, sources, view, days, today)[:2]
        )
        first_run[0] = False
        live = panels.realtime(ask.agg, view.site, now)
        current, series = figures(shown, view, days, today, grain, zone)
        before_totals, before_series = (
            figures(before, view, previous_days, today, grain, zone) if before else (None, None)
        )
        if current.pageviews == 0 and current.events == 0:
            st.info(
                "No page views in this range yet. Start traffic with `tally traffic`, or embed the snippet shown by "
                "`tally up` in a page of this site. Views update every few seconds."
            )
        panels.kpis(current, before_totals, shown.exact, meaning, live=live)
        notes = annotations_for(settings, view.site, days.start, days.end)
        series_chart.time_series(series, before_series, grain, notes, timezone=zone)
        data_age(health.newest_window(ask, view.site, now.date()).result(), now, refresh, zone)
        return current

    current = headline()
    with within_memory(view):
        if not read_only:
            annotate(settings, view.site, today, zone)
        shown_vitals = vitals_panel.read(vitals)
        in_fragment(allowed, lambda: top_tables.top_tables(report, shown_vitals.scroll_depths()))
        panels.events_and_goals(report, current, view.goals)
        panels.custom_properties(views, filtered=view.filtered)
        panels.funnel(raw, view.funnel)
        panels.performance(current, report.exact)
        vitals_panel.core_web_vitals(
            shown_vitals,
            tag=vitals_panel.vitals_tag(settings, view.site),
            breakdowns_in=lambda draw: in_fragment(allowed, draw),
        )
        panels.data_health(settings, checks, every_site=every_site)
    st.caption(f"Figures as of {local_time(now, zone):%H:%M:%S} ({zone}).")
    return view
