"""Raw = ``agg.vitals_1h``: the vitals view counts exactly the vitals beacons of raw.

Pure comparison logic. The view counts non-bot beacons once per event_id: ``vitals`` events, and
``engagement`` events that carry a scroll depth (``jobs/vitals.py``). Per date, over the view's
``all`` rows (the site totals of each hour):

- **vitals beacons**: the sum of ``measured`` equals the non-bot vitals events in raw;
- **vitals bands**: for every vital and band, the sum of its count equals the non-bot vitals
  events in raw whose value lies in that band (``tally.vitals.Vital.band``); the bands that differ
  are named;
- **scroll depths**: ``scroll_depth_count`` and ``scroll_depth_sum`` equal the count and the sum of
  the scroll depths of raw's non-bot vitals and engagement events.

A view short of raw on a day with events that arrived after the watermark is named as late events,
with the backfill that fixes it, as for the other views.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import pandas as pd

from quality.findings import RAW_VIEWS, Finding, examples
from quality.raw_views import explain_mismatch, late_arrivals, recorded_late_since, reportable
from tally.tables import RAW_PAGEVIEWS, VITALS_1H
from tally.vitals import (
    BANDS,
    MEASURED_COLUMN,
    SCROLL_COUNT_COLUMN,
    SCROLL_DEPTH_COLUMN,
    SCROLL_SUM_COLUMN,
    VITALS,
    VITALS_TYPE,
)

VITALS_VIEW = VITALS_1H.table
# The view's counts the audit adds up per date, and what it reads of the view (its `all` rows).
COUNT_COLUMNS = (
    MEASURED_COLUMN,
    *(v.band_column(b) for v in VITALS for b in BANDS),
    SCROLL_SUM_COLUMN,
    SCROLL_COUNT_COLUMN,
)
VIEW_COLUMNS = ("event_date", *COUNT_COLUMNS)
# What it reads of raw, besides the columns every reconciliation reads.
RAW_COLUMNS = (*(v.column for v in VITALS), SCROLL_DEPTH_COLUMN)
ENGAGEMENT_TYPE = "engagement"


@dataclass(frozen=True)
class VitalsInput:
    """What the comparison reads, already limited to the audited site (if any)."""

    dates: tuple[dt.date, ...]
    # raw events of the dates (more are ignored): event_id, event_date, type, is_bot, event_time,
    # ts_received, and RAW_COLUMNS
    events: pd.DataFrame
    rows: pd.DataFrame  # agg.vitals_1h `all` rows: VIEW_COLUMNS
    late_events: pd.DataFrame  # agg.late_events: query, late_rows, event_date (the date it was recorded)
    watermark: dt.timedelta


def beacons(events: pd.DataFrame) -> pd.DataFrame:
    """The raw events the view counts: non-bot vitals events, and engagement events with a scroll depth."""
    counted = reportable(events)
    is_vitals = counted["type"] == VITALS_TYPE
    carries_scroll = (counted["type"] == ENGAGEMENT_TYPE) & counted[SCROLL_DEPTH_COLUMN].notna()
    return counted[is_vitals | carries_scroll]


def expected_rows(events: pd.DataFrame) -> pd.DataFrame:
    """Per date (the index), what the view's ``all`` rows must add up to: COUNT_COLUMNS computed from raw."""
    counted = beacons(events)
    is_vitals = counted["type"] == VITALS_TYPE
    per_event = pd.DataFrame({"event_date": counted["event_date"], MEASURED_COLUMN: is_vitals.astype("int64")})
    for v in VITALS:
        values = pd.to_numeric(counted[v.column], errors="coerce").where(is_vitals)
        band = values.map(lambda x, v=v: None if pd.isna(x) else v.band(float(x)))
        for b in BANDS:
            per_event[v.band_column(b)] = (band == b).astype("int64")
    depth = pd.to_numeric(counted[SCROLL_DEPTH_COLUMN], errors="coerce")
    per_event[SCROLL_SUM_COLUMN] = depth.fillna(0).astype("int64")
    per_event[SCROLL_COUNT_COLUMN] = depth.notna().astype("int64")
    return per_event.groupby("event_date")[list(COUNT_COLUMNS)].sum()


def _sums(rows: pd.DataFrame) -> pd.DataFrame:
    counts = {c: pd.to_numeric(rows[c], errors="coerce").fillna(0).astype("int64") for c in COUNT_COLUMNS}
    return pd.DataFrame({"event_date": rows["event_date"], **counts}).groupby("event_date")[list(COUNT_COLUMNS)].sum()


def _day(table: pd.DataFrame, day: dt.date) -> dict[str, int]:
    found = day in table.index
    return {c: int(table.at[day, c]) if found else 0 for c in COUNT_COLUMNS}


def reconcile_raw_vitals(data: VitalsInput) -> list[Finding]:
    """Per date: beacons, band counts and scroll depths of the view's site totals against raw."""
    expected, actual = expected_rows(data.events), _sums(data.rows)
    late = late_arrivals(beacons(data.events), data.watermark)
    findings: list[Finding] = []
    for day in data.dates:
        want, have = _day(expected, day), _day(actual, day)
        findings += [_beacons(day, want, have), _bands(day, want, have), _scroll(day, want, have)]
    return [_explain(f, late.get(f.date, 0) if f.date else 0, data) for f in findings]


def _beacons(day: dt.date, want: dict[str, int], have: dict[str, int]) -> Finding:
    w, h = want[MEASURED_COLUMN], have[MEASURED_COLUMN]
    message = f"{VITALS_VIEW}: {h:,} vitals beacons measured, {RAW_PAGEVIEWS}: {w:,}" + (
        f" ({h - w:+,})" if h != w else ""
    )
    return Finding(RAW_VIEWS, "vitals beacons", VITALS_VIEW, day, w, h, w == h, message)


def _bands(day: dt.date, want: dict[str, int], have: dict[str, int]) -> Finding:
    columns = [v.band_column(b) for v in VITALS for b in BANDS]
    differ = [f"{c}: {have[c]:,} (raw {want[c]:,})" for c in columns if have[c] != want[c]]
    w, h = sum(want[c] for c in columns), sum(have[c] for c in columns)
    message = f"{VITALS_VIEW}: {h:,} values in Google's bands, {RAW_PAGEVIEWS}: {w:,}"
    if differ:
        message += f"; {len(differ)} band count{'s' if len(differ) > 1 else ''} differ: {examples(differ)}"
    return Finding(RAW_VIEWS, "vitals bands", VITALS_VIEW, day, w, h, not differ, message)


def _scroll(day: dt.date, want: dict[str, int], have: dict[str, int]) -> Finding:
    ok = all(want[c] == have[c] for c in (SCROLL_COUNT_COLUMN, SCROLL_SUM_COLUMN))
    message = (
        f"{VITALS_VIEW}: {have[SCROLL_COUNT_COLUMN]:,} scroll depths summing to {have[SCROLL_SUM_COLUMN]:,},"
        f" {RAW_PAGEVIEWS}: {want[SCROLL_COUNT_COLUMN]:,} summing to {want[SCROLL_SUM_COLUMN]:,}"
    )
    return Finding(
        RAW_VIEWS, "scroll depths", VITALS_VIEW, day, want[SCROLL_COUNT_COLUMN], have[SCROLL_COUNT_COLUMN], ok, message
    )


def _explain(f: Finding, arrived_late: int, data: VitalsInput) -> Finding:
    """A mismatch with its likely cause and the command that fixes it."""
    if f.ok or f.date is None or f.expected is None or f.actual is None:
        return f
    return explain_mismatch(
        f,
        arrived_late=arrived_late,
        recorded=recorded_late_since(data.late_events, f.date),
        watermark=data.watermark,
        noun="vitals beacon",
        parts_differ="the totals agree but the parts do not",
    )
