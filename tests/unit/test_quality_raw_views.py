"""Raw = views: page views per grain, visits across midnight, sketches, late events (pure logic, no services)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import pandas as pd
import pytest

from quality.findings import Finding
from quality.raw_views import ViewsInput, reconcile_raw_views, visit_dates
from tally.sketches import sketch_from_ids
from tally.spans import parse_span

DAY1, DAY2 = dt.date(2026, 1, 10), dt.date(2026, 1, 11)
SITE = "a.test"
TRAFFIC = ("agg.traffic_1m", "agg.traffic_1h", "agg.traffic_1d")


def at(day: dt.date, hour: int, minute: int) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(hour, minute), dt.UTC)


def ms(moment: dt.datetime) -> int:
    return int(moment.timestamp() * 1000)


def event(
    event_id: str, visitor: str, moment: dt.datetime, *, kind: str = "pageview", bot: bool = False, late_by: int = 0
) -> dict[str, Any]:
    return {
        "event_id": event_id,
        "event_date": moment.date(),
        "type": kind,
        "is_bot": bot,
        "site_id": SITE,
        "visitor_id": visitor,
        "event_time": ms(moment),
        "ts_received": ms(moment) + late_by,
    }


# v1 visits 23:50 .. 00:10 (crossing midnight); v2 visits twice on DAY1 (its second visit after an hour);
# a bot and a retried duplicate are in raw but never in the views.
EVENTS = [
    event("a", "v1", at(DAY1, 23, 50)),
    event("b", "v1", at(DAY1, 23, 55), kind="engagement"),
    event("c", "v1", at(DAY2, 0, 10)),
    event("d", "v2", at(DAY1, 10, 0)),
    event("d", "v2", at(DAY1, 10, 0)),
    event("e", "v2", at(DAY1, 11, 30)),
    event("f", "bot", at(DAY1, 12, 0), bot=True),
]


def session(visitor: str, start: dt.datetime, end: dt.datetime, pageviews: int) -> dict[str, Any]:
    return {
        "site_id": SITE,
        "visitor_id": visitor,
        "session_start": pd.Timestamp(start),
        "session_end": pd.Timestamp(end),
        "pageviews": pageviews,
        "event_date": start.date(),
    }


SESSIONS = [
    session("v1", at(DAY1, 23, 50), at(DAY2, 0, 10), 2),
    session("v2", at(DAY1, 10, 0), at(DAY1, 10, 0), 1),
    session("v2", at(DAY1, 11, 30), at(DAY1, 11, 30), 1),
]


def totals(per_day: dict[dt.date, int]) -> pd.DataFrame:
    return pd.DataFrame({"event_date": list(per_day), "pageviews": list(per_day.values())})


def views(
    events: Sequence[dict[str, Any]] = EVENTS,
    *,
    traffic: dict[dt.date, int] | None = None,
    sessions: Sequence[dict[str, Any]] = SESSIONS,
    visits_1d: dict[dt.date, int] | None = None,
    visitors: dict[dt.date, list[str]] | None = None,
    late_rows: int = 0,
) -> ViewsInput:
    traffic = traffic if traffic is not None else {DAY1: 3, DAY2: 1}
    visitors = visitors if visitors is not None else {DAY1: ["v1", "v2"], DAY2: ["v1"]}
    late = pd.DataFrame({"query": ["traffic"] * bool(late_rows), "late_rows": [late_rows] * bool(late_rows)})
    return ViewsInput(
        dates=(DAY1, DAY2),
        events=pd.DataFrame(list(events)),
        traffic={table: totals(traffic) for table in TRAFFIC},
        sessions=pd.DataFrame(list(sessions)),
        visits_1d=totals(visits_1d if visits_1d is not None else {DAY1: 4}),
        visitor_sketches=pd.DataFrame(
            {"event_date": list(visitors), "visitors_sketch": [sketch_from_ids(ids) for ids in visitors.values()]}
        ),
        late_events=late.assign(event_date=[DAY2] * len(late)),
        watermark=dt.timedelta(minutes=10),
    )


def failed(findings: list[Finding]) -> list[tuple[str, str, dt.date | None]]:
    return [(f.name, f.subject, f.date) for f in findings if not f.ok]


def test_views_that_hold_every_non_bot_page_view_once_match_raw() -> None:
    findings = reconcile_raw_views(views())
    assert failed(findings) == []
    assert len(findings) == 2 * (3 + 3 + 1)  # per date: 3 traffic grains, sessions + visits + orphans, visitors


def test_a_visit_crossing_midnight_counts_its_page_views_on_the_day_it_started() -> None:
    data = views()
    pageviews = data.events[data.events["type"] == "pageview"].drop_duplicates("event_id")
    dates = visit_dates(pageviews, data.sessions)
    assert dict(zip(pageviews["event_id"], dates, strict=True)) == {
        "a": DAY1,
        "c": DAY1,
        "d": DAY1,
        "e": DAY1,
        "f": None,
    }


def test_a_corrupted_grain_is_named_by_table() -> None:
    data = views()
    edited = {**data.traffic, "agg.traffic_1h": totals({DAY1: 10, DAY2: 1})}
    findings = reconcile_raw_views(ViewsInput(**{**vars(data), "traffic": edited}))
    assert failed(findings) == [("page views", "agg.traffic_1h", DAY1)]
    (wrong,) = [f for f in findings if not f.ok]
    assert "agg.traffic_1h: 10 page views, raw.pageviews: 3 (+7)" in wrong.message
    assert "the view was changed" in wrong.message and "tally backfill --from 2026-01-10 --to 2026-01-10" in wrong.hint


def test_a_late_event_the_stream_dropped_is_named_with_the_backfill_that_counts_it() -> None:
    late = event("g", "v3", at(DAY1, 12, 0), late_by=3 * 3_600_000)
    findings = reconcile_raw_views(views([*EVENTS, late], late_rows=1))
    assert failed(findings) == [
        ("page views", "agg.traffic_1m", DAY1),
        ("page views", "agg.traffic_1h", DAY1),
        ("page views", "agg.traffic_1d", DAY1),
        ("page views without a visit", "agg.sessions", DAY1),
        ("visitors", "agg.traffic_1d", DAY1),
    ]
    for f in (f for f in findings if not f.ok):
        assert "late events: 1 page view of 2026-01-10 arrived more than 10 minutes after its event time" in f.message
        assert "agg.late_events counted 1 late row since 2026-01-10" in f.message
        assert f.hint.endswith("tally backfill --from 2026-01-10 --to 2026-01-10")


def test_a_shortfall_without_late_arrivals_is_not_blamed_on_late_events() -> None:
    findings = reconcile_raw_views(views(traffic={DAY1: 2, DAY2: 1}))
    wrong = [f for f in findings if not f.ok]
    assert {f.subject for f in wrong} == set(TRAFFIC)
    assert all("late" not in f.message and "misses events" in f.message for f in wrong)


def test_a_missing_visit_leaves_its_page_views_without_a_visit() -> None:
    findings = reconcile_raw_views(views(sessions=SESSIONS[1:], visits_1d={DAY1: 2}))
    assert failed(findings) == [
        ("page views without a visit", "agg.sessions", DAY1),
        ("page views without a visit", "agg.sessions", DAY2),
    ]
    orphans = {f.date: f for f in findings if not f.ok}
    assert orphans[DAY1].actual == 1 and "holds 1 page view of raw.pageviews: a;" in orphans[DAY1].message
    assert "of raw.pageviews: c;" in orphans[DAY2].message


def test_page_views_of_a_visit_still_open_are_in_flight_not_without_a_visit() -> None:
    # v1's visit across midnight has not closed: agg.sessions does not hold it yet, nor agg.visits_1d.
    data = views(sessions=SESSIONS[1:], visits_1d={DAY1: 2})
    findings = reconcile_raw_views(ViewsInput(**{**vars(data), "open_event_ids": frozenset({"a", "b", "c"})}))
    assert failed(findings) == []
    still_open = {f.date: f for f in findings if f.name == "page views of visits still open"}
    assert still_open[DAY1].actual == 1 and still_open[DAY2].actual == 1
    assert all(f.ok and "visits still open" in f.message for f in still_open.values())


def test_page_views_received_within_the_views_latency_are_in_flight_not_missing() -> None:
    just_now = event("g", "v3", at(DAY2, 0, 20))  # the views have not counted it yet
    data = views([*EVENTS, just_now])
    findings = reconcile_raw_views(ViewsInput(**{**vars(data), "in_flight_after": just_now["ts_received"]}))
    assert failed(findings) == []
    (flying,) = [f for f in findings if f.name == "page views in flight"]
    assert (flying.date, flying.actual, flying.ok) == (DAY2, 1, True)
    assert failed(reconcile_raw_views(data)) == [  # without the cut, held against the views as missing
        ("page views", "agg.traffic_1m", DAY2),
        ("page views", "agg.traffic_1h", DAY2),
        ("page views", "agg.traffic_1d", DAY2),
        ("page views without a visit", "agg.sessions", DAY2),
        ("visitors", "agg.traffic_1d", DAY2),
    ]


def test_a_visitor_sketch_outside_its_bounds_is_reported() -> None:
    many = [f"v{i}" for i in range(500)]
    events = [event(f"p{i}", v, at(DAY1, 9, 0)) for i, v in enumerate(many)]
    data = views(events, traffic={DAY1: 500}, sessions=[], visits_1d={}, visitors={DAY1: many[:400]})
    visitors = next(f for f in reconcile_raw_views(data) if f.name == "visitors" and f.date == DAY1)
    assert not visitors.ok and visitors.expected == 500 and 395 <= (visitors.actual or 0) <= 405


def test_the_watermark_setting_is_read_as_an_interval() -> None:
    assert parse_span("10 minutes") == dt.timedelta(minutes=10)
    assert parse_span("1 hour") == dt.timedelta(hours=1)
    with pytest.raises(ValueError, match="not a time span"):
        parse_span("ten minutes")
