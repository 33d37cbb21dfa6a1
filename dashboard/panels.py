"""The report panels: realtime, KPIs, top tables, goals, custom properties, funnel, performance,
health (the time series is :mod:`dashboard.series_chart`).

Figures and tables are drawn as HTML (:mod:`dashboard.markup`: one element per panel, not one per
figure), which escapes every text: attacker-controlled text (URLs, referrers, event names) is shown
as text, in those tables and in charts; never in Markdown.
"""

from __future__ import annotations

import datetime as dt
import functools

import pandas as pd
import streamlit as st

from dashboard import markup
from dashboard.answers import AnsweredReport, AnsweredVitals
from dashboard.export import safe_csv
from dashboard.health import HealthFigures
from dashboard.markup import Card
from dashboard.view import View
from query import freshness
from query.aggregates import AggregateReport, Aggregates, Range, Totals, realtime_visitors
from query.goals import Step
from query.report import Report
from query.zoned import ZonedReport
from tally.lag import describe_lag
from tally.props import MAX_KEYS_PER_DAY, MAX_VALUES_PER_KEY, OTHER_VALUE
from tally.settings import Settings
from tally.sketches import Estimate


def visitors_text(estimate: Estimate, exact: bool) -> str:
    return f"{estimate.value:,.0f}" if exact else estimate.label()


def _change(now: float | None, before: float | None) -> str | None:
    if now is None or before is None or before == 0:
        return None
    return f"{(now - before) / before:+.1%}"


def _fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m {secs:02d}s"


EVENTS_QUESTION = ("top", "event", 20)  # the custom events table's, asked ahead by :func:`ask_ahead`
VITALS_DIMENSIONS = ("all", "page", "device")  # what vitals_panel.read asks


def ask_ahead(
    report: AnsweredReport,
    previous: AnsweredReport | None,
    vitals: AnsweredVitals,
    views: AnsweredReport,
    raw: AnsweredReport | None,
    view: View,
    grain: str,
) -> None:
    """Start the questions the panels below will ask, in the order they are drawn, so that they are
    computed side by side while the first ones are drawn (:mod:`dashboard.answers`). The top tables'
    open tab asks its own (:func:`dashboard.top_tables.ask_open_tab`)."""
    for asked in (report, previous):
        if asked is not None:
            asked.ask("totals")
            asked.ask("series", grain)
    for dimension in VITALS_DIMENSIONS:
        vitals.ask("vitals", dimension)
    report.ask(*EVENTS_QUESTION)
    for goal in view.goals:
        report.ask("goal", goal)
    views.ask("property_keys")
    if raw is not None and len(view.funnel) >= 2:
        raw.ask("funnel", view.funnel)


def realtime(agg: Aggregates, site_id: str, now: dt.datetime) -> Card:
    """The visitors of the last 5 minutes, as the first headline figure."""
    estimate = realtime_visitors(agg, site_id, now)
    shown = estimate.label() if estimate else "0"
    return Card("Visitors in the last 5 minutes", shown, help="Hopping 5-minute window (agg.active_5m), HLL sketch.")


VISITORS_HELP = {
    True: "Exact distinct visitor ids (drill-down).",
    False: "HLL union over the range; ± is the 95% bound.",
}


def kpi_cards(current: Totals, previous: Totals | None, exact: bool) -> list[Card]:
    """Six KPIs, each with its change versus the previous period; a visit figure counting visits
    still open is marked provisional (their bounce, duration and page views change until they close)."""
    before = previous
    rate = current.bounce_rate
    per_visit = current.views_per_visit
    opened = current.open_visits
    provisional = " (provisional)" if opened else ""
    open_help = (
        f"{opened:,} of the site's visits in this range are still open: counted from their first event;"
        " their bounce, duration and page views are provisional until they close (30 minutes without an event)."
        if opened
        else ""
    )
    return [
        Card(
            "Unique visitors" + ("" if exact else " (≈)"),
            visitors_text(current.visitors, exact),
            _change(current.visitors.value, before.visitors.value if before else None),
            help=VISITORS_HELP[exact],
        ),
        Card("Page views", f"{current.pageviews:,}", _change(current.pageviews, before.pageviews if before else None)),
        Card(
            "Visits",
            f"{current.visits:,}",
            _change(current.visits, before.visits if before else None),
            help=open_help,
        ),
        Card(
            "Bounce rate" + provisional,
            f"{rate:.0%}" if rate is not None else "–",
            _change(rate, before.bounce_rate if before else None),
            inverse=True,
            help=open_help,
        ),
        Card(
            "Visit duration" + provisional,
            _fmt_duration(current.avg_duration_s),
            _change(current.avg_duration_s, before.avg_duration_s if before else None),
            help=open_help,
        ),
        Card(
            "Views per visit" + provisional,
            f"{per_visit:.2f}" if per_visit is not None else "–",
            _change(per_visit, before.views_per_visit if before else None),
            help=open_help,
        ),
    ]


def kpis(current: Totals, previous: Totals | None, exact: bool, meaning: str, *, live: Card | None = None) -> None:
    """The realtime visitors (``live``), then six KPIs in two rows of three (the ± bounds need the width);
    ``meaning`` says what "visitors" counts over the range (:func:`tally.salt_periods.visitors_meaning`)."""
    parts = [markup.cards([live], per_row=3)] if live is not None else []
    parts += [markup.cards(kpi_cards(current, previous, exact), per_row=3)]
    parts.append(markup.note(f"Visitors here are {meaning}."))
    st.html(markup.block(*parts))


def csv_button(frame: pd.DataFrame, name: str, title: str) -> None:
    """The CSV download of a panel's table (formula-safe). The file is made when the button is clicked,
    not on every page run (a page has a dozen tables), and the click does not rerun the page."""
    st.download_button(
        f"{title} (CSV)",
        functools.partial(safe_csv, frame),
        file_name=f"{name}.csv",
        mime="text/csv",
        key=f"csv_{name}",
        on_click="ignore",
    )


def shown_table(frame: pd.DataFrame, *, exact: bool, value_label: str) -> pd.DataFrame:
    """A ranked table as shown (and exported): its value column named, an estimate's bound in the
    visitors column's name."""
    shown = frame.rename(columns={"value": value_label}).drop(columns=["visitors_bound"], errors="ignore")
    if "visitors" in shown and not exact:
        bound = frame["visitors_bound"].max() if "visitors_bound" in frame else 0
        shown = shown.rename(columns={"visitors": f"Visitors (≈ ±{bound:.1%})"})
    return shown


def table_html(title: str, shown: pd.DataFrame, key: str, *, percent: tuple[str, ...] = ()) -> str:
    """A titled table, or the title and "No data in this range."."""
    if shown.empty:
        return markup.titled(title, markup.note("No data in this range."))
    return markup.titled(title, markup.table(shown, name=key, percent=percent))


def events_and_goals(report: Report, totals: Totals, goals: tuple[Step, ...]) -> None:
    st.subheader("Custom events and goals")
    _, dimension, limit = EVENTS_QUESTION
    events = report.top(dimension, limit=limit)
    total = totals.visitors.value
    if not events.empty:
        events = events.drop(columns=["pageviews"]).assign(conversion_rate=events["visitors"] / total if total else 0.0)
    shown = shown_table(events, exact=report.exact, value_label="Event")
    parts = [table_html("Custom events", shown, "events", percent=("conversion_rate",))]
    frame = pd.DataFrame()
    if goals:
        rows = []
        for goal in goals:
            reached = report.goal(goal)
            rate = reached.value / total if total else 0.0
            rows.append({"Goal": str(goal), "Visitors": visitors_text(reached, report.exact), "Conversion rate": rate})
        frame = pd.DataFrame(rows)
        parts.append(table_html("Goals", frame, "goals", percent=("Conversion rate",)))
        if not report.exact:
            parts.append(markup.note("Conversion rate = ≈ goal visitors / ≈ all visitors (both HLL estimates)."))
    else:
        parts.append(
            markup.note(
                "Add goals (a page or a custom event) in the sidebar's Goals and funnel menu to see their conversion"
                " rates."
            )
        )
    st.html(markup.block(*parts))
    downloads = [(shown, "events", "Custom events"), (frame, "goals", "Goals")]
    for (data, key, title), column in zip(downloads, st.columns(2) if goals else [st.container()], strict=False):
        if not data.empty:
            with column:
                csv_button(data, key, title)


EVERY_EVENT = "(every event)"


@st.fragment
def custom_properties(report: AggregateReport | ZonedReport | AnsweredReport, *, filtered: bool) -> None:
    """Values of one property key of custom events, from agg.props_1d (never filtered: the view holds
    no page, source or device, so a filtered page shows the whole site's values and says so).

    A fragment: picking another event or key reruns this panel alone, not the page."""
    st.subheader("Custom properties")
    if filtered:
        st.caption("From the aggregate view agg.props_1d, without the filters: it holds no other dimensions.")
    keys = report.property_keys()
    if keys.empty:
        st.caption("No custom events with properties in this range.")
        return
    left, right = st.columns(2)
    names = [EVERY_EVENT, *keys.groupby("name")["events"].sum().sort_values(ascending=False).index]
    name = left.selectbox("Event", names, key="props_event")
    of_name = keys if name == EVERY_EVENT else keys[keys["name"] == name]
    choices = list(of_name.groupby("key")["events"].sum().sort_values(ascending=False).index)
    key = right.selectbox("Property", choices, key="props_key")
    frame = report.props(str(key), limit=20, name=None if name == EVERY_EVENT else str(name))
    shown = shown_table(frame, exact=False, value_label="Value")
    explained = markup.note(
        f"Per day, the {MAX_KEYS_PER_DAY} properties sent with the most events; for each event and property, the"
        f" {MAX_VALUES_PER_KEY} values with the most events, the rest shown as {OTHER_VALUE}. ≈ visitors: HLL union."
    )
    st.html(markup.block(table_html("Property values", shown, "props"), explained))
    if not shown.empty:
        csv_button(shown, "props", "Property values")


def funnel(raw_report: Report | None, steps: tuple[Step, ...]) -> None:
    st.subheader("Funnel")
    if len(steps) < 2:
        st.caption(
            "Pick 2 to 5 steps in the sidebar's Goals and funnel menu: visitors who did step 1, then step 2, … (from"
            " raw events)."
        )
        return
    assert raw_report is not None and hasattr(raw_report, "funnel")
    frame = raw_report.funnel(steps)
    shown = frame.rename(
        columns={"step": "Step", "visitors": "Visitors", "of_first_step": "Of step 1", "dropped": "Dropped"}
    )
    explained = markup.note(
        "Exact, from raw events of the range (drill-down): each step must come after the previous one."
    )
    st.html(markup.block(markup.table(shown, name="funnel", percent=("Of step 1",)), explained))
    csv_button(frame, "funnel", "Funnel")


def performance(totals: Totals, exact: bool) -> None:
    st.subheader("Engagement time and page load time")
    rows = []
    for name, values in (("Engagement time (s)", totals.engagement_ms), ("Page load time (s)", totals.load_ms)):
        if values:
            rows.append(
                {
                    "Metric": name,
                    **{f"p{int(q * 100)}": v / 1000 for q, v in zip((0.5, 0.9, 0.99), values, strict=True)},
                }
            )
    if not rows:
        st.caption("No engagement or load times in this range.")
        return
    explained = markup.note(
        "Exact percentiles (drill-down)." if exact else "≈ percentiles from merged t-digests (rank error ≲ 0.5%)."
    )
    st.html(markup.block(markup.table(pd.DataFrame(rows), name="performance"), explained))


def data_health(settings: Settings, figures: HealthFigures, *, every_site: bool) -> None:
    """Freshness and this site's audit for everyone; whole-instance figures only when ``every_site``
    (``figures`` holds them only then: :func:`dashboard.health.start`). Alerts are drawn above the figures."""
    st.subheader("Data health")
    now = figures.now
    limit = dt.timedelta(minutes=settings.alerts.lag_minutes)
    last = figures.newest_window.result()
    age = max(0.0, (now - last).total_seconds() / 60) if last else None
    shown = [Card("Last data", f"{age:.0f} min ago" if age is not None else "none today or yesterday")]
    if figures.bots is not None:
        bots = f"{figures.bots.result():,}"
        shown.append(
            Card(
                "Bots and monitors in range",
                bots,
                help="Events of crawlers, site monitors and automation: kept in raw, left out of every figure.",
            )
        )
    behind = freshness.views_lag(figures.newest_event.result(), last, now.date())
    if behind > limit:
        st.error(
            f"Alert: the views are {describe_lag(behind)} behind the archived events of this site (limit"
            f" `alerts.lag_minutes` = {settings.alerts.lag_minutes}). Is the views job running? See `tally status`"
            " and the views log; `tally backfill` recomputes any dates it missed."
        )
    parts = []
    if every_site:
        assert figures.archive_lag and figures.late_events and figures.checks, "started for a viewer of every site"
        lag = figures.archive_lag.result()
        lag_age = lag.age(now) if lag is not None else dt.timedelta(0)
        shown_lag = f"{lag.messages:,}" if lag is not None else "broker unreachable"
        if lag is not None and lag.messages:
            shown_lag += f", oldest {describe_lag(lag_age)}"
        shown.append(Card("Archive lag, every site (messages)", shown_lag))
        if lag_age > limit:
            st.error(
                f"Alert: the oldest message not yet archived has waited {describe_lag(lag_age)} in Kafka (limit"
                f" `alerts.lag_minutes` = {settings.alerts.lag_minutes}). Is the archiver running? See `tally status`"
                " and the archiver log; Kafka keeps messages for `kafka.retention_hours` only."
            )
        late = f"{figures.late_events.result():,}"
        shown.append(Card("Late events in range, every site", late, help="Fixed by tally backfill."))
        checks = figures.checks.result().head(50)
        title = "Data-quality checks, every site (newest per table, partition and check; failures first)"
        parts.append(markup.titled(title, markup.table(checks, name="checks")))
        audit_title = "Latest reconciliation audit of this site or of every site (Kafka = raw = aggregates)"
    else:
        parts.append(
            markup.note(
                "Archive lag, late events and data-quality checks are counted over every site at once, so only "
                "users granted every site see them."
            )
        )
        audit_title = "Latest reconciliation audit of this site (tally audit --site: Kafka = raw = aggregates)"
    parts.append(markup.titled(audit_title, markup.table(figures.audit.result(), name="audit")))
    st.html(markup.block(markup.cards(shown, per_row=3), *parts))


def previous_days(view: View, today: dt.date) -> Range:
    return Range(*view.previous(today))
