"""Raw = agg.vitals_1h: vitals beacons, band counts and scroll depths per date, late events (pure logic)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pandas as pd
import pytest

from quality.findings import RAW_VIEWS, Finding
from quality.raw_vitals import VIEW_COLUMNS, VitalsInput, reconcile_raw_vitals
from tally.spans import parse_span
from tally.vitals import BANDS, VITALS

DAY1, DAY2 = dt.date(2026, 1, 10), dt.date(2026, 1, 11)
NO_VITALS = {v.column: None for v in VITALS}


def ms(day: dt.date, hour: int) -> int:
    return int(dt.datetime.combine(day, dt.time(hour), dt.UTC).timestamp() * 1000)


def event(
    event_id: str, day: dt.date, kind: str = "vitals", *, bot: bool = False, late_by: int = 0, **values: Any
) -> dict[str, Any]:
    return {
        "event_id": event_id,
        "event_date": day,
        "type": kind,
        "is_bot": bot,
        "event_time": ms(day, 12),
        "ts_received": ms(day, 12) + late_by,
        **NO_VITALS,
        "scroll_depth": None,
        **values,
    }


# A retried duplicate, a bot's beacon, an engagement event without a scroll depth and a page view with one
# are in raw; the view counts none of them. Values on a band's edge: CLS 0.1 is good, FCP 3000 ms needs
# improvement, LCP 2500 ms is good. Beacon b has no INP (no interaction).
A: dict[str, Any] = {"lcp_ms": 2000, "inp_ms": 300, "cls": 0.3, "fcp_ms": 1000, "ttfb_ms": 900, "scroll_depth": 50}
EVENTS = [
    event("a", DAY1, **A),
    event("a", DAY1, **A),
    event("b", DAY1, lcp_ms=4500, cls=0.1, fcp_ms=3000, ttfb_ms=1800),
    event("c", DAY1, bot=True, lcp_ms=9000, scroll_depth=10),
    event("d", DAY1, "engagement", scroll_depth=80),
    event("e", DAY1, "engagement"),
    event("f", DAY1, "pageview", scroll_depth=30),
    event("g", DAY2, lcp_ms=2500, scroll_depth=100),
]


def row(day: dt.date, measured: int, scroll: tuple[int, int] = (0, 0), **bands: int) -> dict[str, Any]:
    counts = {v.band_column(b): 0 for v in VITALS for b in BANDS}
    assert set(bands) <= set(counts), set(bands) - set(counts)
    total, count = scroll
    return {
        "event_date": day,
        "measured": measured,
        **counts,
        **bands,
        "scroll_depth_sum": total,
        "scroll_depth_count": count,
    }


# DAY1's site totals over two hours: a in one, b and d in the other.
ROWS = [
    row(DAY1, 1, (50, 1), lcp_good=1, inp_needs_improvement=1, cls_poor=1, fcp_good=1, ttfb_needs_improvement=1),
    row(DAY1, 1, (80, 1), lcp_poor=1, cls_good=1, fcp_needs_improvement=1, ttfb_needs_improvement=1),
    row(DAY2, 1, (100, 1), lcp_good=1),
]
NO_LATE = pd.DataFrame({"query": [], "late_rows": [], "event_date": []})


def reconcile(
    events: list[dict[str, Any]] = EVENTS, rows: list[dict[str, Any]] = ROWS
) -> dict[tuple[str, Any], Finding]:
    frame = pd.DataFrame(rows, columns=list(VIEW_COLUMNS))
    found = reconcile_raw_vitals(
        VitalsInput((DAY1, DAY2), pd.DataFrame(events), frame, NO_LATE, parse_span("10 minutes"))
    )
    assert all(f.check == RAW_VIEWS for f in found)
    return {(f.name, f.date): f for f in found}


def test_a_view_that_counts_exactly_the_human_beacons_of_raw_passes_every_comparison() -> None:
    found = reconcile()
    assert len(found) == 6 and all(f.ok for f in found.values()), [f.message for f in found.values() if not f.ok]
    assert (found["vitals beacons", DAY1].expected, found["vitals bands", DAY1].expected) == (2, 9)
    assert (found["scroll depths", DAY1].expected, found["scroll depths", DAY2].expected) == (2, 1)


def test_a_band_count_off_by_one_is_named_though_the_beacons_agree() -> None:
    rows = [dict(ROWS[0], lcp_good=0, lcp_needs_improvement=1), *ROWS[1:]]
    found = reconcile(rows=rows)
    bands = found["vitals bands", DAY1]
    assert not bands.ok and found["vitals beacons", DAY1].ok
    assert "lcp_good: 0 (raw 1)" in bands.message and "lcp_needs_improvement: 1 (raw 0)" in bands.message
    assert "the parts do not" in bands.message and "tally backfill --from 2026-01-10" in bands.hint


def test_a_bots_beacon_counted_by_the_view_is_a_mismatch() -> None:
    rows = [*ROWS, row(DAY1, 1, (10, 1), lcp_poor=1)]
    found = reconcile(rows=rows)
    assert [k for k, f in found.items() if not f.ok] == [
        ("vitals beacons", DAY1),
        ("vitals bands", DAY1),
        ("scroll depths", DAY1),
    ]
    assert "counts more than raw.pageviews" in found["vitals beacons", DAY1].message


@pytest.mark.parametrize("late", [True, False], ids=["arrived late", "lost"])
def test_a_view_short_of_a_beacon_names_late_events_when_they_explain_it(late: bool) -> None:
    events = [*EVENTS, event("h", DAY2, lcp_ms=100, late_by=3_600_000 if late else 0)]
    found = reconcile(events=events)
    short = found["vitals beacons", DAY2]
    assert (short.expected, short.actual, short.ok) == (2, 1, False)
    assert ("late events: 1 vitals beacon of 2026-01-11" in short.message) is late
    assert ("the view misses vitals beacons" in short.message) is not late


def test_a_scroll_sum_that_differs_fails_even_with_the_same_count() -> None:
    rows = [*ROWS[:2], {**ROWS[2], "scroll_depth_sum": 99}]
    found = reconcile(rows=rows)
    assert not found["scroll depths", DAY2].ok and found["vitals beacons", DAY2].ok
    assert "1 scroll depths summing to 99" in found["scroll depths", DAY2].message
