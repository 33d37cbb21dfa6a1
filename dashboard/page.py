"""The report page for one visitor of the dashboard, once access is settled (``dashboard/app.py``).

:func:`show` reads top to bottom as the page run's steps: read the view from the URL, check access,
let the sidebar change the view, ask every question at once (:mod:`dashboard.questions`), then draw
the heading, the live figures (:mod:`dashboard.live`) and the panels. The process-wide pieces every
page run shares (the table reader, the answers kept, the threads) are here too.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

import pandas as pd
import streamlit as st

from dashboard import health, imported_history, markup, panels, top_tables, vitals_panel
from dashboard.answers import EVERY_TABLE, AnswerCache, Asker
from dashboard.controls import sidebar
from dashboard.export import sidebar_exports
from dashboard.fragments import in_fragment
from dashboard.live import live_figures
from dashboard.questions import PageRun, Questions, ask_questions, site_days, within_memory
from dashboard.view import View, ViewError, from_query, range_label, to_query
from query.aggregates import Aggregates, Totals
from query.site_time import local_time, local_today
from query.sources import Sources
from tally.annotations import MAX_TEXT, AnnotationError, add_annotation
from tally.changes import load_changes
from tally.log import kv
from tally.quarantine import PartitionStatus
from tally.settings import Settings, load_settings
from tally.tables import ACTIVE_5M, QUALITY_PARTITIONS

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
    another tab, or a revoked share link, reruns the whole page, which shows the login form); so
    does each rerun of the top tables' and the vitals' tabs (fragments too).
    """
    now = dt.datetime.now(dt.UTC)
    view = read_view(params, default_site=sites[0])
    check_access(view, sites)
    ask = asker(settings)
    sources = Sources(settings, ask.agg)  # the page run's one: every question below goes through it
    if not read_only:
        view = choose_view(view, sites, ask, sources, now)
    days = site_days(sources, view, now)
    history = (
        imported_history.daily(sources, view.site, days.shown.start, days.shown.end)
        if view.imports and not view.filtered
        else {}
    )
    run = PageRun(settings, sources, ask, view, now, days, history)
    asked = ask_questions(run, every_site=every_site)
    draw_heading(run, asked, read_only=read_only)
    current = live_figures(run, asked.reports, allowed=allowed)
    draw_panels(run, asked, current, read_only=read_only, every_site=every_site, allowed=allowed)
    st.caption(f"Figures as of {local_time(now, run.days.zone):%H:%M:%S} ({run.days.zone}).")
    return view


# A share link's page in a frame on the site's own page: Streamlit's embedded mode (``?embed=true``)
# already leaves out its header, toolbar and padding; the sidebar (the link's expiry) goes too.
COMPACT_STYLE = "<style>[data-testid=stSidebar],[data-testid=stSidebarCollapsedControl]{display:none!important}</style>"


def compact_view() -> None:
    """Draw the page compact, for a frame (``?embed=true`` on a share link: docs/DASHBOARD.md, "Embedding")."""
    st.html(COMPACT_STYLE)


def read_view(params: Mapping[str, str], *, default_site: str) -> View:
    """The view in ``params`` (the URL, or a share link's pinned view); a bad one stops the page with what to do."""
    try:
        return from_query(params, default_site=default_site)
    except ViewError as e:
        # e.problem, not str(e): the bad value is the URL's, and st.error renders Markdown.
        st.error(f"This link's view is not valid: {e.problem}. Remove the parameter or pick the view again.")
        st.stop()


def check_access(view: View, sites: list[str]) -> None:
    """Stop the page unless the view's site is one of the viewer's ``sites``."""
    if view.site not in sites:
        st.error("You have no access to that site, or it is not configured.")
        st.stop()


def choose_view(view: View, sites: list[str], ask: Asker, sources: Sources, now: dt.datetime) -> View:
    """The sidebar's controls (not on a read-only shared view): return the view they describe, now in the URL."""
    view = sidebar(view, sites, ask, now, timezone_of=sources.timezone)
    st.sidebar.button("Refresh figures", key="refresh", help="Reads the tables again (keeps you logged in).")
    zone = sources.timezone(view.site)
    sidebar_exports(sources, view.site, *view.dates(local_today(zone, now)), zone)
    st.query_params.from_dict(to_query(view))
    return view


def draw_heading(run: PageRun, asked: Questions, *, read_only: bool) -> None:
    """The title, the range, the quarantine warning and what the filters mean; a filtered page before
    any raw event says so and stops there."""
    view, days = run.view, run.days
    st.title(f"Tally · {view.site}")
    label = (
        range_label(view.preset, days.zone)
        if view.preset != "custom"
        else f"{days.shown.start} – {days.shown.end} ({days.zone})"
    )
    st.caption(f"{label} · bots excluded" + (" · read-only shared view" if read_only else ""))
    quarantine_warning(asked.quarantine.result(), view.site)
    if view.filtered and asked.reports.raw is None:
        st.info("No raw events yet, so filters cannot be applied.")
        st.stop()
    if view.filtered:
        shown = ", ".join(f"{k}" for k in view.filters)
        st.info(f"Filtered by {shown}: every figure below is computed from raw events (exact drill-down).")


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


def draw_panels(
    run: PageRun,
    asked: Questions,
    current: Totals,
    *,
    read_only: bool,
    every_site: bool,
    allowed: Callable[[], bool] | None,
) -> None:
    """Every panel under the live figures, in order (``current``: the totals they drew); the top
    tables' and the vitals' tabs are fragments, each rerun of which first asks ``allowed``."""
    settings, view, report = run.settings, run.view, asked.reports.report
    with within_memory(view):
        if not read_only:
            annotate(settings, view.site, run.days.today, run.days.zone)
        shown_vitals = vitals_panel.read(asked.vitals)
        in_fragment(
            "top_tables", run.run_id, allowed, lambda: top_tables.top_tables(report, shown_vitals.scroll_depths())
        )
        imported_history.draw(run.sources, view.site, run.days.shown.start, run.days.shown.end, run.imported)
        panels.events_and_goals(report, current, view.goals)
        panels.custom_properties(asked.views, filtered=view.filtered)
        panels.funnel(asked.reports.raw, view.funnel)
        panels.performance(current, report.exact)
        vitals_panel.core_web_vitals(
            shown_vitals,
            tag=vitals_panel.vitals_tag(settings, view.site),
            breakdowns_in=lambda draw: in_fragment("vitals_breakdowns", run.run_id, allowed, draw),
        )
        panels.data_health(settings, asked.data_health, every_site=every_site)
        if every_site and not read_only:
            settings_changes(settings, view.site)


CHANGES_OPEN = "changes_open"  # the settings changes' expander (its state key)
CHANGES_SHOWN = 100  # the newest, in the expander


def settings_changes(settings: Settings, site_id: str) -> None:
    """Who changed which setting of this site (and of every site) when: the audit trail
    (:mod:`tally.changes`), for users granted every site; read only when the expander is open."""
    box = st.expander("Settings changes (audit trail)", key=CHANGES_OPEN, on_change="rerun")
    if not box.open:
        return
    found = load_changes(settings, site_ids=(site_id,))[-CHANGES_SHOWN:][::-1]
    if not found:
        box.caption(
            "No change recorded yet for this site. `tally site`, `tally user`, `tally apikey`, `tally share`,"
            " the Stats API's admin endpoint and this page's share links record theirs."
        )
        return
    rows = pd.DataFrame(
        [
            {
                "When (UTC)": c.at,
                "Who": c.actor,
                "How": c.via,
                "Site": c.site_id,
                "Change": f"{c.subject} {c.action}",
                "What": c.detail,
            }
            for c in found
        ]
    )
    box.html(markup.block(markup.table(rows, name="settings-changes")))
    box.caption(f"The newest {len(found)}, newest first; all of them with `tally changes --site {site_id}`.")


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
