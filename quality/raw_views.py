"""Raw = views: every view holds exactly the raw events it was computed from.

Pure comparison logic. Views count non-bot page views once per event_id (``is_bot`` rows stay in
raw but are never reported), so per date:

- **page views**: raw's page views equal the sum of ``pageviews`` in ``agg.traffic_1m``, ``_1h``
  and ``_1d`` (dimension ``all``);
- **page views of visits**: each raw page view is attributed to its visit in ``agg.sessions``
  (same site and visitor, ``session_start <= event_time <= session_end``) and counted on the
  visit's date, as the views date a visit by its start; the sums of ``pageviews`` in
  ``agg.sessions`` and ``agg.visits_1d`` (``all``) equal that count. Page views that belong to
  no visit are reported as **page views without a visit**;
- **visitors**: the union estimate of the day's ``agg.traffic_1d`` (``all``) visitor sketches is
  within its own 2-sigma bounds of the exact distinct visitors in raw.

Views fall short of raw when the stream dropped events that arrived after the watermark; such a
shortfall is named as late events (raw's arrival times, and ``agg.late_events``), with the
backfill that fixes it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import pandas as pd

from quality.findings import KAFKA_RAW, RAW_VIEWS, SKETCHES, Finding, backfill_hint, examples
from tally.sketches import union_estimate
from tally.spans import describe_span
from tally.tables import RAW_PAGEVIEWS, SESSIONS, TRAFFIC_1D, TRAFFIC_1H, TRAFFIC_1M, VISITS_1D

TRAFFIC_TABLES = (TRAFFIC_1M.table, TRAFFIC_1H.table, TRAFFIC_1D.table)


@dataclass(frozen=True)
class ViewsInput:
    """What the comparison reads, already limited to the audited site (if any)."""

    dates: tuple[dt.date, ...]
    # raw events of the dates and the day after: event_id, event_date, type, is_bot, site_id,
    # visitor_id, event_time, ts_received
    events: pd.DataFrame
    traffic: Mapping[str, pd.DataFrame]  # table -> its 'all' rows: event_date, pageviews
    sessions: (
        pd.DataFrame
    )  # from the day before: site_id, visitor_id, session_start, session_end, pageviews, event_date
    visits_1d: pd.DataFrame  # 'all' rows: event_date, pageviews
    visitor_sketches: pd.DataFrame  # agg.traffic_1d 'all' rows: event_date, visitors_sketch
    late_events: pd.DataFrame  # agg.late_events: query, late_rows, event_date (the date it was recorded)
    watermark: dt.timedelta
    # Work in flight, which the views have not written yet: the events of visits still open
    # (query.open_visits; the views write a visit once it closes), and the events received at or
    # after ``in_flight_after`` (ms; None: none), within the views' latency of the audit's start.
    open_event_ids: frozenset[str] = frozenset()
    in_flight_after: int | None = None


def reportable(events: pd.DataFrame) -> pd.DataFrame:
    """Events the views count: not bots, once per event_id."""
    return events[~events["is_bot"].fillna(False).astype(bool)].drop_duplicates("event_id")


def _per_date(frame: pd.DataFrame, column: str | None = None) -> dict[dt.date, int]:
    if frame.empty:
        return {}
    if column is None:
        return {d: int(n) for d, n in frame["event_date"].value_counts().items()}
    return {d: int(n) for d, n in frame.groupby("event_date")[column].sum().items()}


def _ms(timestamps: pd.Series) -> pd.Series:
    return (timestamps - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(milliseconds=1)


def visit_dates(pageviews: pd.DataFrame, sessions: pd.DataFrame) -> pd.Series:
    """For each page view (by index), the date of the visit that holds it, or None (no visit does)."""
    if pageviews.empty or sessions.empty:
        return pd.Series([None] * len(pageviews), index=pageviews.index, dtype=object)
    left = pageviews[["site_id", "visitor_id", "event_time"]].astype({"event_time": "int64"})
    left = left.assign(row=pageviews.index).sort_values("event_time")
    right = pd.DataFrame(
        {
            "site_id": sessions["site_id"],
            "visitor_id": sessions["visitor_id"],
            "start": _ms(sessions["session_start"]).astype("int64"),
            "end": _ms(sessions["session_end"]).astype("int64"),
            "visit_date": sessions["event_date"],
        }
    ).sort_values("start")
    matched = pd.merge_asof(
        left, right, left_on="event_time", right_on="start", by=["site_id", "visitor_id"], direction="backward"
    )
    inside = matched["end"].notna() & (matched["event_time"] <= matched["end"])
    dates = matched["visit_date"].astype(object).where(inside, None)
    return pd.Series(dates.to_numpy(), index=matched["row"].to_numpy(), dtype=object).reindex(pageviews.index)


def _count(check: str, name: str, subject: str, day: dt.date, expected: int, actual: int, what: str) -> Finding:
    diff = actual - expected
    shown = f"{subject}: {actual:,} {what}, {RAW_PAGEVIEWS}: {expected:,}" + (f" ({diff:+,})" if diff else "")
    return Finding(check, name, subject, day, expected, actual, diff == 0, shown)


def reconcile_raw_views(data: ViewsInput) -> list[Finding]:
    """Every per-date comparison of raw with the views, with late events named where they explain a
    gap; work in flight (page views received within the views' latency, visits still open) is
    counted apart, as in flight, never as missing."""
    pageviews = reportable(data.events)
    pageviews = pageviews[pageviews["type"] == "pageview"]
    if data.in_flight_after is not None:
        flying = pageviews[pageviews["ts_received"] >= data.in_flight_after]
        pageviews = pageviews[pageviews["ts_received"] < data.in_flight_after]
    else:
        flying = pageviews.iloc[:0]
    expected = _per_date(pageviews)
    findings: list[Finding] = _in_flight(data, flying)
    for table in TRAFFIC_TABLES:
        actual = _per_date(data.traffic[table], "pageviews")
        for day in data.dates:
            findings.append(
                _count(RAW_VIEWS, "page views", table, day, expected.get(day, 0), actual.get(day, 0), "page views")
            )
    visit_of = visit_dates(pageviews, data.sessions)
    in_visits = _per_date(pd.DataFrame({"event_date": visit_of.dropna()}))
    sessions = _per_date(data.sessions, "pageviews")
    visits_1d = _per_date(data.visits_1d, "pageviews")
    orphans = pageviews[visit_of.isna() & pageviews["event_date"].isin(list(data.dates))]
    still_open = orphans["event_id"].astype(str).isin(data.open_event_ids)
    opened, orphans = orphans[still_open], orphans[~still_open]
    for day in data.dates:
        want = in_visits.get(day, 0)
        what = "page views in visits"
        findings.append(
            _count(RAW_VIEWS, "page views of visits", SESSIONS.table, day, want, sessions.get(day, 0), what)
        )
        findings.append(
            _count(RAW_VIEWS, "page views of visits", VISITS_1D.table, day, want, visits_1d.get(day, 0), what)
        )
        lonely = orphans[orphans["event_date"] == day]
        if lonely.empty:
            message = f"every page view in {RAW_PAGEVIEWS} belongs to a visit in agg.sessions"
        else:
            ids = examples(lonely["event_id"].astype(str), len(lonely))
            message = f"no visit in agg.sessions holds {plural(len(lonely), 'page view')} of {RAW_PAGEVIEWS}: {ids}"
        findings.append(
            Finding(RAW_VIEWS, "page views without a visit", SESSIONS.table, day, 0, len(lonely), lonely.empty, message)
        )
        if (open_today := int((opened["event_date"] == day).sum())) > 0:
            message = (
                f"{plural(open_today, 'page view')} of {RAW_PAGEVIEWS} in visits still open: the views write a"
                " visit once it has closed (the session gap and the watermark after its last event)"
            )
            name = "page views of visits still open"
            findings.append(Finding(RAW_VIEWS, name, SESSIONS.table, day, None, open_today, True, message))
    findings += _visitors(data)
    return _explain(findings, data, pageviews)


def _in_flight(data: ViewsInput, flying: pd.DataFrame) -> list[Finding]:
    """Per date, the page views received within the views' latency of the audit's start: counted
    apart, neither expected of the views nor held against them."""
    findings = []
    for day, count in sorted(_per_date(flying).items()):
        if day in data.dates:
            message = (
                f"{plural(count, 'page view')} of {RAW_PAGEVIEWS} received within the views' latency of the"
                " audit's start: not yet expected of the views (audit again in a minute to count them)"
            )
            findings.append(Finding(RAW_VIEWS, "page views in flight", RAW_PAGEVIEWS, day, None, count, True, message))
    return findings


def _visitors(data: ViewsInput) -> list[Finding]:
    events = reportable(data.events)
    if data.in_flight_after is not None:  # not yet in the views' sketches
        events = events[events["ts_received"] < data.in_flight_after]
    findings = []
    for day in data.dates:
        exact = int(events.loc[events["event_date"] == day, "visitor_id"].nunique())
        sketches = data.visitor_sketches.loc[data.visitor_sketches["event_date"] == day, "visitors_sketch"]
        estimate = union_estimate(bytes(s) for s in sketches if s is not None)
        ok = estimate.lower <= exact <= estimate.upper
        message = (
            f"agg.traffic_1d visitors ≈ {estimate.value:,.1f} (2-sigma bounds {estimate.lower:,.1f} .. "
            f"{estimate.upper:,.1f}), exact distinct visitors in {RAW_PAGEVIEWS}: {exact:,}"
        )
        findings.append(Finding(SKETCHES, "visitors", TRAFFIC_1D.table, day, exact, round(estimate.value), ok, message))
    return findings


def plural(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def late_arrivals(events: pd.DataFrame, watermark: dt.timedelta) -> dict[dt.date, int]:
    """Per date, the events that arrived later than the watermark after their event time."""
    delay = events["ts_received"] - events["event_time"]
    return _per_date(events[delay > watermark / dt.timedelta(milliseconds=1)])


def recorded_late_since(late_events: pd.DataFrame, day: dt.date) -> int:
    """Late rows the stream recorded on or after ``day`` (each query counts an event once; take the largest)."""
    if late_events.empty:
        return 0
    since = late_events[late_events["event_date"] >= day]
    return int(since.groupby("query")["late_rows"].sum().max()) if not since.empty else 0


def late_cause(day: dt.date, arrived_late: int, recorded: int, watermark: dt.timedelta, noun: str) -> tuple[str, str]:
    """The message suffix and the hint for a view short of raw on a day with late events."""
    cause = (
        f"; late events: {plural(arrived_late, noun)} of {day} arrived more than"
        f" {describe_span(watermark)} after {'its' if arrived_late == 1 else 'their'} event time,"
        f" agg.late_events counted"
        f" {plural(recorded, 'late row')} since {day}"
    )
    hint = (
        f"late events: the stream dropped events of {day} that arrived after the watermark;"
        f" a backfill counts them: tally backfill --from {day} --to {day}"
    )
    return cause, hint


def explain_mismatch(
    f: Finding,
    *,
    arrived_late: int,
    recorded: int,
    watermark: dt.timedelta,
    noun: str,
    short: bool | None = None,
    missing: str = "",
    parts_differ: str = "",
    detail: str = "",
) -> Finding:
    """A dated mismatch of a view's count with raw's, failed, its message given ``detail`` and its
    likely cause, and the hint of the command that fixes it. The causes: short with late events
    (``noun``: what arrived late), short (``short``: the view counts less than raw, by default
    ``actual < expected``), totals that agree while their parts do not (``parts_differ`` says
    which; empty when the check has no parts), or more than raw holds; ``missing``: what a short
    view misses (``noun`` in the plural unless given). Every reconciliation of a view with raw
    explains its mismatches here."""
    assert f.date is not None and f.expected is not None and f.actual is not None, "a dated count"
    day, short = f.date, f.actual < f.expected if short is None else short
    if short and (arrived_late or recorded):
        cause, hint = late_cause(day, arrived_late, recorded, watermark, noun)
    elif short:
        cause, hint = f"; the view misses {missing or noun + 's'} of {RAW_PAGEVIEWS}", backfill_hint(day)
    elif parts_differ and f.actual == f.expected:
        cause, hint = f"; {parts_differ}: the view was changed", backfill_hint(day)
    else:
        cause = f"; the view counts more than {RAW_PAGEVIEWS} holds: rows lost from raw after the view was computed"
        cause, hint = cause + f" (see {KAFKA_RAW}), or the view was changed", backfill_hint(day)
    return replace(f, ok=False, message=f.message + detail + cause, hint=hint)


def _explain(findings: Sequence[Finding], data: ViewsInput, pageviews: pd.DataFrame) -> list[Finding]:
    """Give each mismatch its likely cause and the command that fixes it."""
    late = late_arrivals(pageviews, data.watermark)
    explained = []
    for f in findings:
        if f.ok or f.date is None or f.expected is None or f.actual is None:
            explained.append(f)
            continue
        short = f.actual > 0 if f.name == "page views without a visit" else f.actual < f.expected
        arrived_late, recorded = late.get(f.date, 0), recorded_late_since(data.late_events, f.date)
        explained.append(
            explain_mismatch(
                f,
                short=short,
                arrived_late=arrived_late,
                recorded=recorded,
                watermark=data.watermark,
                noun="page view",
                missing="events",
            )
        )
    return explained
