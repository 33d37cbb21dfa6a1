"""Raw = agg.props_1d: property events row by row, rows of bots only, visitor sketches, late events (pure logic)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import pandas as pd

from quality.findings import RAW_VIEWS, SKETCHES, Finding
from quality.raw_props import PropsInput, reconcile_raw_props
from tally.sketches import sketch_from_ids
from tally.spans import parse_span

DAY1, DAY2 = dt.date(2026, 1, 10), dt.date(2026, 1, 11)
SITE = "a.test"


def ms(day: dt.date, hour: int) -> int:
    return int(dt.datetime.combine(day, dt.time(hour), dt.UTC).timestamp() * 1000)


def event(
    event_id: str,
    visitor: str,
    day: dt.date,
    props: dict[str, str | None] | None,
    *,
    name: str | None = "signup",
    kind: str = "event",
    bot: bool = False,
    late_by: int = 0,
) -> dict[str, Any]:
    return {
        "event_id": event_id,
        "event_date": day,
        "type": kind,
        "is_bot": bot,
        "site_id": SITE,
        "visitor_id": visitor,
        "event_time": ms(day, 12),
        "ts_received": ms(day, 12) + late_by,
        "name": name,
        "props": None if props is None else list(props.items()),  # as pyarrow gives a map
    }


# A retried duplicate, a bot, a page view with properties and an event without any are in raw; the view
# counts none of them. A missing name and a missing value are `(none)`.
EVENTS = [
    event("a", "v1", DAY1, {"plan": "pro", "seats": "5"}),
    event("a", "v1", DAY1, {"plan": "pro", "seats": "5"}),
    event("b", "v2", DAY1, {"plan": "pro"}),
    event("c", "v3", DAY1, {"plan": None}, name=None),
    event("d", "bot", DAY1, {"plan": "bot-plan"}, bot=True),
    event("e", "v4", DAY1, {"plan": "page"}, kind="pageview", name=None),
    event("f", "v5", DAY1, None),
    event("g", "v1", DAY2, {"plan": "team"}),
]


def row(day: dt.date, name: str, key: str, value: str, visitors: Sequence[str], events: int = 0) -> dict[str, Any]:
    return {
        "site_id": SITE,
        "event_date": day,
        "name": name,
        "key": key,
        "value": value,
        "events": events or len(visitors),
        "visitors_sketch": sketch_from_ids(visitors),
    }


ROWS = [
    row(DAY1, "signup", "plan", "pro", ["v1", "v2"]),
    row(DAY1, "signup", "seats", "5", ["v1"]),
    row(DAY1, "(none)", "plan", "(none)", ["v3"]),
    row(DAY2, "signup", "plan", "team", ["v1"]),
]


def reconcile(
    events: Sequence[dict[str, Any]] = EVENTS, rows: Sequence[dict[str, Any]] = ROWS, late: pd.DataFrame | None = None
) -> list[Finding]:
    return reconcile_raw_props(
        PropsInput(
            dates=(DAY1, DAY2),
            events=pd.DataFrame(list(events)),
            rows=pd.DataFrame(list(rows), columns=list(ROWS[0])),
            late_events=late if late is not None else pd.DataFrame({"query": [], "late_rows": [], "event_date": []}),
            watermark=parse_span("10 minutes"),
        )
    )


def failed(findings: Sequence[Finding]) -> list[tuple[str, str, dt.date | None]]:
    return [(f.check, f.name, f.date) for f in findings if not f.ok]


def named(findings: Sequence[Finding], name: str, day: dt.date = DAY1) -> Finding:
    return next(f for f in findings if f.name == name and f.date == day)


def test_a_view_that_counts_each_non_bot_custom_events_properties_once_matches_raw() -> None:
    findings = reconcile()
    assert failed(findings) == []
    assert {(f.name, f.date): (f.expected, f.actual) for f in findings if f.check == RAW_VIEWS} == {
        ("property events", DAY1): (4, 4),
        ("property rows not in raw", DAY1): (0, 0),
        ("property events", DAY2): (1, 1),
        ("property rows not in raw", DAY2): (0, 0),
    }
    assert {f.subject for f in findings} == {"agg.props_1d"}
    visitors = named(findings, "property visitors")
    assert visitors.check == SKETCHES and visitors.expected == 3


def test_nothing_to_count_on_either_side_matches() -> None:
    assert failed(reconcile(events=[event("x", "v", DAY1, None, kind="pageview")], rows=[])) == []


def test_a_row_counted_from_a_bots_events_is_named_as_bots_only() -> None:
    findings = reconcile(rows=[*ROWS, row(DAY1, "signup", "plan", "bot-plan", ["bot"])])
    assert failed(findings) == [
        (RAW_VIEWS, "property events", DAY1),
        (RAW_VIEWS, "property rows not in raw", DAY1),
        (SKETCHES, "property visitors", DAY1),  # the bot is one visitor more than raw's counted events have
    ]
    extra = named(findings, "property rows not in raw")
    assert extra.actual == 1 and "1 carried by bots' events only" in extra.message
    assert "signup plan=bot-plan: 1 (raw 0)" in extra.message
    assert "tally backfill --from 2026-01-10 --to 2026-01-10" in extra.hint
    events = named(findings, "property events")
    assert (events.expected, events.actual) == (4, 5) and "counts more than raw.pageviews holds" in events.message


def test_a_row_short_of_raw_names_the_row_and_the_late_events_that_explain_it() -> None:
    late = [*EVENTS, event("h", "v6", DAY1, {"plan": "pro"}, late_by=3 * 3_600_000)]
    recorded = pd.DataFrame({"query": ["props"], "late_rows": [1], "event_date": [DAY1]})
    findings = reconcile(events=late, late=recorded)
    # v6 is a visitor the sketches never saw, so the visitors are short too.
    assert failed(findings) == [(RAW_VIEWS, "property events", DAY1), (SKETCHES, "property visitors", DAY1)]
    events = named(findings, "property events")
    assert (events.expected, events.actual) == (5, 4)
    assert "signup plan=pro: 2 (raw 3)" in events.message
    assert "late events: 1 custom event of 2026-01-10 arrived more than 10 minutes" in events.message
    assert "a backfill counts them: tally backfill --from 2026-01-10 --to 2026-01-10" in events.hint


def test_rows_that_differ_are_caught_even_when_the_sums_agree() -> None:
    moved = [row(DAY1, "signup", "plan", "pro", ["v1", "v2"], events=3), *ROWS[2:]]
    findings = reconcile(rows=moved)
    events = named(findings, "property events")
    assert not events.ok and events.expected == events.actual == 4
    assert "2 rows differ" in events.message and "the sums agree but rows do not" in events.message


def test_a_sketch_that_cannot_be_read_fails_the_visitors_comparison_instead_of_the_audit() -> None:
    broken = [{**ROWS[0], "visitors_sketch": b"not a sketch"}, *ROWS[1:]]
    findings = reconcile(rows=broken)
    assert failed(findings) == [(SKETCHES, "property visitors", DAY1)]
    visitors = named(findings, "property visitors")
    assert "cannot be read" in visitors.message and visitors.actual is None


def test_visitors_far_from_raw_fail_the_sketch_comparison() -> None:
    inflated = [{**ROWS[0], "visitors_sketch": sketch_from_ids([f"x{i}" for i in range(500)])}, *ROWS[1:]]
    assert failed(reconcile(rows=inflated)) == [(SKETCHES, "property visitors", DAY1)]
