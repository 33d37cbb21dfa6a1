"""Any Stats API query answered exactly from raw events (DuckDB over an Arrow dataset), against
truths counted here in plain Python from the same events."""

from __future__ import annotations

import datetime as dt
import itertools
import random
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from query.aggregates import Range
from query.engine import Answer, fits_aggregates, run
from query.exact import ExactQuery
from query.goals import Step
from query.plausible import parse_filter, parse_query
from query.raw import RawQuery
from query.report import Report
from query.spec import Filter, Query, QueryError
from tally.table_schemas import IMPORTED_DAILY_SCHEMA, IMPORTED_RANGES_SCHEMA

SITE = "shop.example"
TODAY = dt.date(2026, 11, 25)
START = dt.date(2026, 10, 28)  # a Wednesday: the first week's Monday is before the range
GAP_MS = 30 * 60 * 1000
PAGES = ["/", "/pricing", "/blog/a", "/blog/b", "/signup"]
COUNTRIES = ["DE", "FR", None]
PLANS = ["free", "pro", "team"]


def make_events(seed: int = 7, visitors: int = 120) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    events: list[dict[str, Any]] = []
    for v in range(visitors):
        day = START + dt.timedelta(days=rng.randrange(27))
        visitor = f"v{v}-{day}"
        country, device = rng.choice(COUNTRIES), rng.choice(["desktop", "mobile"])
        at = int(dt.datetime.combine(day, dt.time(rng.randrange(24)), dt.UTC).timestamp() * 1000)
        for _visit in range(rng.randint(1, 2)):
            source = rng.choice(["google", "news.ycombinator.com", None])
            for n in range(rng.randint(1, 4)):
                page = rng.choice(PAGES)
                base = dict(
                    site_id=SITE,
                    visitor_id=visitor,
                    country=country,
                    device=device,
                    source=source if n == 0 else None,
                    event_date=dt.datetime.fromtimestamp(at / 1000, dt.UTC).date(),
                    is_bot=False,
                    path=page,
                    hostname="shop.example",
                )
                events.append({**base, "type": "pageview", "event_time": at, "load_ms": rng.randrange(100, 3000)})
                if rng.random() < 0.3:
                    at += 1000
                    plan = rng.choice(PLANS)
                    events.append(
                        {**base, "type": "event", "name": "signup", "event_time": at, "props": {"plan": plan}}
                    )
                at += rng.randrange(10_000, 600_000)
            at += GAP_MS + 60_000
    # a bot and another site's event: neither is ever counted
    events.append(
        {
            "site_id": SITE,
            "visitor_id": "bot",
            "type": "pageview",
            "path": "/",
            "event_time": at,
            "event_date": START,
            "is_bot": True,
        }
    )
    events.append(
        {
            "site_id": "other.example",
            "visitor_id": "x",
            "type": "pageview",
            "path": "/",
            "event_time": at,
            "event_date": START,
            "is_bot": False,
        }
    )
    for i, event in enumerate(events):
        event["event_id"] = f"e{i}"
    return events


COLUMNS = {
    "event_id": pa.string(),
    "site_id": pa.string(),
    "visitor_id": pa.string(),
    "type": pa.string(),
    "name": pa.string(),
    "path": pa.string(),
    "hostname": pa.string(),
    "event_time": pa.int64(),
    "event_date": pa.date32(),
    "is_bot": pa.bool_(),
    "props": pa.map_(pa.string(), pa.string()),
    "engagement_ms": pa.int64(),
    "load_ms": pa.int64(),
    "source": pa.string(),
    "channel": pa.string(),
    "campaign": pa.string(),
    "country": pa.string(),
    "region": pa.string(),
    "city": pa.string(),
    "browser": pa.string(),
    "os": pa.string(),
    "device": pa.string(),
    "referrer": pa.string(),
    "utm_source": pa.string(),
    "utm_medium": pa.string(),
    "utm_content": pa.string(),
    "utm_term": pa.string(),
}


def dataset(events: list[dict[str, Any]]) -> ds.Dataset:
    rows = {name: [e.get(name) for e in events] for name in COLUMNS}
    rows["props"] = [list((e.get("props") or {}).items()) for e in events]
    return ds.dataset(pa.table(rows, schema=pa.schema(COLUMNS)))


class RawOnly:
    """Sources with raw events only: a query that fits the aggregates is a test failure here."""

    def __init__(self, events: list[dict[str, Any]], goals: tuple[Step, ...] = ()) -> None:
        self.exact_query = ExactQuery(dataset(events), SITE, GAP_MS, goals)

    def aggregate_report(self, site_id: str, start: dt.date, end: dt.date) -> Report:
        raise AssertionError("this test's queries are answered from raw events")

    def exact(self, site_id: str) -> ExactQuery | None:
        return self.exact_query

    def visitors_meaning(self, site_id: str, start: dt.date, end: dt.date) -> str:
        return "daily visitor ids"

    def open_visits(self, site_id: str, start: dt.date, end: dt.date) -> int:
        return 0  # the events are all in the past: no visit is still open

    def imported(self, site_id: str, start: dt.date, end: dt.date, table: str) -> pa.Table:
        return IMPORTED_DAILY_SCHEMA.empty_table()  # nothing imported

    def imported_ranges(self, site_id: str, start: dt.date, end: dt.date) -> pa.Table:
        return IMPORTED_RANGES_SCHEMA.empty_table()  # nothing imported

    def aggregate_vitals(self, site_id: str, start: dt.date, end: dt.date) -> Any:
        raise AssertionError("this test asks no Core Web Vitals (tests/unit/test_query_vitals.py does)")

    def exact_vitals(self, site_id: str, start: dt.date, end: dt.date, **kw: Any) -> Any:
        raise AssertionError("this test asks no Core Web Vitals (tests/unit/test_query_vitals.py does)")


EVENTS = make_events()
LIVE = [e for e in EVENTS if e["site_id"] == SITE and not e["is_bot"]]


def ask(body: dict[str, Any], sources: RawOnly | None = None) -> Answer:
    query = parse_query({"site_id": SITE, "date_range": [START.isoformat(), TODAY.isoformat()], **body}, today=TODAY)
    assert not fits_aggregates(query) or sources is not None
    return run(query, sources or RawOnly(EVENTS))


def table(answer: Answer) -> dict[tuple[str, ...], list[Any]]:
    return {tuple(r["dimensions"]): r["metrics"] for r in answer.results}


def counted(
    pick: Callable[[dict[str, Any]], bool], key: Callable[[dict[str, Any]], tuple[str, ...]]
) -> dict[tuple[str, ...], list[int]]:
    views: Counter[tuple[str, ...]] = Counter()
    people: dict[tuple[str, ...], set[str]] = defaultdict(set)
    for e in LIVE:
        if pick(e):
            views[key(e)] += e["type"] == "pageview"
            people[key(e)].add(e["visitor_id"])
    return {k: [len(people[k]), views[k]] for k in people}


def test_two_dimensions_count_each_pair_of_values_exactly() -> None:
    answer = ask(
        {
            "metrics": ["visitors", "pageviews"],
            "dimensions": ["event:page", "visit:country"],
            "filters": [["is_not", "event:page", ["/nowhere"]]],
        }
    )
    truth = counted(lambda e: True, lambda e: (e["path"], e["country"] or "(none)"))
    assert table(answer) == truth
    assert answer.meta["source"] == "raw" and answer.meta["metrics"]["visitors"]["exact"] is True


@pytest.mark.parametrize(
    ("filters", "pick"),
    [
        ([["contains", "event:page", ["blog"]]], lambda e: "blog" in e["path"]),
        ([["contains_not", "event:page", ["blog"]]], lambda e: "blog" not in e["path"]),
        ([["matches", "event:page", ["^/blog/[ab]$"]]], lambda e: e["path"].startswith("/blog/")),
        ([["matches_not", "event:page", ["^/(pricing|signup)$"]]], lambda e: e["path"] not in ("/pricing", "/signup")),
        ([["is", "event:page", ["/PRICING"], {"case_sensitive": False}]], lambda e: e["path"] == "/pricing"),
        (
            [["or", [["is", "visit:country", ["DE"]], ["is", "event:page", ["/"]]]]],
            lambda e: e["country"] == "DE" or e["path"] == "/",
        ),
        ([["not", ["is", "visit:country", ["FR", "DE"]]]], lambda e: e["country"] is None),
        (
            [["and", [["is", "visit:device", ["mobile"]], ["not", ["contains", "event:page", ["sign"]]]]]],
            lambda e: e["device"] == "mobile" and "sign" not in e["path"],
        ),
    ],
)
def test_every_filter_operator_keeps_exactly_the_events_it_names(filters: list[Any], pick: Callable[..., bool]) -> None:
    body = {"metrics": ["visitors", "pageviews"], "dimensions": ["event:page", "visit:device"], "filters": filters}
    assert table(ask(body)) == counted(pick, lambda e: (e["path"], e["device"]))


def test_goals_and_their_conversion_rates_divide_converted_by_all_visitors() -> None:
    goals = (Step("event", "signup"), Step("page", "/pricing"))
    answer = ask(
        {"metrics": ["visitors", "events", "conversion_rate"], "dimensions": ["event:goal"]}, RawOnly(EVENTS, goals)
    )
    everyone = len({e["visitor_id"] for e in LIVE})
    signups = [e for e in LIVE if e["type"] == "event" and e["name"] == "signup"]
    pricing = [e for e in LIVE if e["type"] == "pageview" and e["path"] == "/pricing"]
    got = table(answer)
    for label, hits in (("signup", signups), ("Visit /pricing", pricing)):
        people = len({e["visitor_id"] for e in hits})
        assert got[(label,)] == [people, len(hits), round(100 * people / everyone, 2)]


def test_a_goal_filter_with_a_source_dimension_converts_within_each_source() -> None:
    answer = ask(
        {
            "metrics": ["visitors", "conversion_rate"],
            "dimensions": ["visit:device"],
            "filters": [["is", "event:goal", ["signup"]]],
        }
    )
    assert set(table(answer)) == {("desktop",), ("mobile",)}, "no goals configured: the event's name is the goal"
    for (device,), (visitors, rate) in table(answer).items():
        of_device = {e["visitor_id"] for e in LIVE if e["device"] == device}
        converted = {e["visitor_id"] for e in LIVE if e["device"] == device and e.get("name") == "signup"}
        assert (visitors, rate) == (len(converted), round(100 * len(converted) / len(of_device), 2))
    with pytest.raises(QueryError, match="not configured"):
        ask(
            {"metrics": ["visitors"], "filters": [["is", "event:goal", ["nope"]]]},
            RawOnly(EVENTS, (Step("event", "signup"),)),
        )


def test_custom_properties_break_down_by_value_with_none_for_events_without_it() -> None:
    answer = ask(
        {
            "metrics": ["visitors", "events"],
            "dimensions": ["event:props:plan"],
            "filters": [["is", "event:name", ["signup"]], ["is_not", "event:page", ["/nowhere"]]],
        }
    )
    events: Counter[str] = Counter(e["props"]["plan"] for e in LIVE if e.get("name") == "signup")
    assert {k[0]: v[1] for k, v in table(answer).items()} == dict(events)
    assert set(table(answer)) <= {(p,) for p in PLANS}


def test_weeks_and_months_are_labelled_as_plausible_labels_them() -> None:
    for grain in ("week", "month"):
        answer = ask(
            {
                "metrics": ["pageviews"],
                "dimensions": [f"time:{grain}"],
                "include": {"time_labels": True},
                "filters": [["is_not", "event:page", ["/nowhere"]]],
            }
        )
        truth: Counter[str] = Counter()
        for e in LIVE:
            if e["type"] != "pageview":
                continue
            day = dt.datetime.fromtimestamp(e["event_time"] / 1000, dt.UTC).date()
            label = max(day - dt.timedelta(days=day.weekday()), START) if grain == "week" else day.replace(day=1)
            truth[label.isoformat()] += 1
        assert {k[0]: v[0] for k, v in table(answer).items()} == dict(truth)
        assert set(truth) <= set(answer.meta["time_labels"])
        assert [r["dimensions"][0] for r in answer.results] == sorted(truth), "time ascending by default"


def test_visit_metrics_with_a_page_filter_count_the_visits_that_saw_the_page() -> None:
    answer = ask({"metrics": ["visits", "bounce_rate"], "filters": [["is", "event:page", ["/pricing"]]]})
    visits = sessionise(LIVE)
    seen = [v for v in visits if any(e["path"] == "/pricing" and e["type"] == "pageview" for e in v)]
    bounces = sum(1 for v in seen if sum(e["type"] == "pageview" for e in v) == 1)
    assert answer.results[0]["metrics"] == [len(seen), round(100 * bounces / len(seen), 1)]


def sessionise(events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    visits: list[list[dict[str, Any]]] = []
    by_visitor: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in sorted(events, key=lambda e: (e["visitor_id"], e["event_time"], e["event_id"])):
        by_visitor[e["visitor_id"]].append(e)
    for evs in by_visitor.values():
        current = [evs[0]]
        for prev, e in itertools.pairwise(evs):
            if e["event_time"] - prev["event_time"] >= GAP_MS:
                visits.append(current)
                current = []
            current.append(e)
        visits.append(current)
    return [v for v in visits if any(e["type"] == "pageview" for e in v)]


def test_visits_by_their_own_attributes_under_a_filter_on_one_count_the_visits_alone() -> None:
    # Every dimension and filter is of the visit's first event: answered from the visits, no event joined.
    answer = ask(
        {
            "metrics": ["visits", "bounce_rate", "visit_duration"],
            "dimensions": ["visit:source"],
            "filters": [["is", "visit:device", ["mobile"]]],
        }
    )
    truth: dict[tuple[str, ...], list[Any]] = {}
    rows: dict[str, list[list[dict[str, Any]]]] = defaultdict(list)
    for visit in sessionise(LIVE):
        if visit[0]["device"] == "mobile":
            rows[visit[0]["source"] or "(none)"].append(visit)
    for source, visits in rows.items():
        bounces = sum(1 for v in visits if sum(e["type"] == "pageview" for e in v) == 1)
        seconds = sum(v[-1]["event_time"] - v[0]["event_time"] for v in visits) / 1000 / len(visits)
        truth[(source,)] = [len(visits), round(100 * bounces / len(visits), 1), round(seconds)]
    assert table(answer) == truth


def test_visits_by_day_under_a_country_filter_count_each_visit_on_the_day_it_started() -> None:
    # The dashboard's filtered chart: a time bucket and a filter of the visit's own, no event joined.
    # One German visit starts at 23:50 UTC and goes on past midnight: it counts on its first day only.
    late = int(dt.datetime.combine(START + dt.timedelta(days=3), dt.time(23, 50), dt.UTC).timestamp() * 1000)
    crossing = [
        {"site_id": SITE, "visitor_id": "night-owl", "country": "DE", "type": "pageview", "path": path, "is_bot": False}
        | {"event_time": at, "event_date": dt.datetime.fromtimestamp(at / 1000, dt.UTC).date(), "event_id": f"n{i}"}
        for i, (path, at) in enumerate([("/", late), ("/pricing", late + 20 * 60_000)])
    ]
    events = EVENTS + crossing
    answer = ask(
        {
            "metrics": ["visits", "bounce_rate"],
            "dimensions": ["time:day"],
            "filters": [["is", "visit:country", ["DE"]]],
        },
        RawOnly(events),
    )
    rows: dict[tuple[str, ...], list[list[dict[str, Any]]]] = defaultdict(list)
    for visit in sessionise([e for e in events if e["site_id"] == SITE and not e["is_bot"]]):
        if visit[0]["country"] == "DE":
            started = dt.datetime.fromtimestamp(visit[0]["event_time"] / 1000, dt.UTC)
            rows[(started.date().isoformat(),)].append(visit)
    truth = {
        day: [len(vs), round(100 * sum(sum(e["type"] == "pageview" for e in v) == 1 for v in vs) / len(vs), 1)]
        for day, vs in rows.items()
    }
    night = (START + dt.timedelta(days=3)).isoformat()
    assert any(v[0]["visitor_id"] == "night-owl" for v in rows[(night,)])
    assert table(answer) == truth


def test_a_comparison_gives_each_row_the_earlier_figures_and_the_change() -> None:
    halfway = START + dt.timedelta(days=15)
    answer = ask(
        {
            "metrics": ["pageviews"],
            "dimensions": ["event:page"],
            "date_range": [halfway.isoformat(), (halfway + dt.timedelta(days=14)).isoformat()],
            "filters": [["is_not", "visit:device", ["toaster"]]],
            "include": {"compare": "previous_period"},
        }
    )
    assert answer.meta["comparison_date_range"] == [
        (START + dt.timedelta(days=0)).isoformat(),
        (halfway - dt.timedelta(days=1)).isoformat(),
    ]

    def views(first: dt.date, last: dt.date) -> Counter[str]:
        return Counter(e["path"] for e in LIVE if e["type"] == "pageview" and first <= e["event_date"] <= last)

    now, before = views(halfway, halfway + dt.timedelta(days=14)), views(START, halfway - dt.timedelta(days=1))
    for row in answer.results:
        page = row["dimensions"][0]
        assert row["metrics"] == [now[page]]
        assert row["comparison"]["metrics"] == [before[page]]
        expected = round((now[page] - before[page]) / before[page] * 100) if before[page] else 100
        assert row["comparison"]["change"] == [expected]


def test_a_date_time_range_counts_only_the_events_inside_it() -> None:
    first = dt.datetime.combine(START + dt.timedelta(days=3), dt.time(6), dt.UTC)
    last = first + dt.timedelta(hours=30)
    answer = ask({"metrics": ["pageviews"], "date_range": [first.isoformat(), last.isoformat()]})
    inside = [
        e
        for e in LIVE
        if e["type"] == "pageview" and first.timestamp() * 1000 <= e["event_time"] < last.timestamp() * 1000 + 1000
    ]
    assert answer.results[0]["metrics"] == [len(inside)]
    assert answer.meta["source"] == "raw"


def test_a_bad_regular_expression_is_a_clear_error_naming_the_filters() -> None:
    with pytest.raises(QueryError, match="regular expression") as caught:
        ask({"metrics": ["visitors"], "filters": [["matches", "event:page", ["(unclosed"]]]})
    assert caught.value.part == "filters"


def test_values_that_look_like_sql_are_only_ever_values() -> None:
    answer = ask(
        {
            "metrics": ["visitors"],
            "dimensions": ["event:props:x'); DROP TABLE raw; --"],
            "filters": [["is", "event:page", ["'; SELECT 1; --"]]],
        }
    )
    assert answer.results == []


@pytest.mark.parametrize(
    ("body", "fits"),
    [
        ({"metrics": ["visitors", "events"], "dimensions": ["event:props:plan"]}, True),
        (
            {"metrics": ["events"], "dimensions": ["event:props:plan"], "filters": [["is", "event:name", ["signup"]]]},
            True,
        ),
        ({"metrics": ["events"], "dimensions": ["event:props:plan"], "filters": [["is", "event:page", ["/"]]]}, False),
        (
            {"metrics": ["events"], "dimensions": ["event:props:plan"], "filters": [["contains", "event:name", ["s"]]]},
            False,
        ),
        ({"metrics": ["pageviews"], "dimensions": ["event:props:plan"]}, False),
        ({"metrics": ["visitors"], "dimensions": ["event:page"]}, True),
        ({"metrics": ["visitors"], "dimensions": ["event:page"], "filters": [["is", "visit:country", ["DE"]]]}, False),
        (
            {"metrics": ["visitors"], "dimensions": ["event:page"], "filters": [["contains", "event:page", ["/b"]]]},
            True,
        ),
        ({"metrics": ["percentage"], "dimensions": ["event:page"], "filters": [["is", "event:page", ["/"]]]}, False),
        (
            {
                "metrics": ["visits"],
                "dimensions": ["visit:source"],
                "filters": [["not", ["is", "visit:source", ["(none)"]]]],
            },
            True,
        ),
        ({"metrics": ["visitors"], "dimensions": ["time:week"]}, False),
        ({"metrics": ["views_per_visit"], "dimensions": ["visit:source"]}, False),
        ({"metrics": ["bounce_rate"], "dimensions": ["event:page"]}, False),
        ({"metrics": ["visitors"], "date_range": "24h"}, False),
    ],
)
def test_a_query_goes_to_the_aggregates_only_when_they_hold_its_answer(body: dict[str, Any], fits: bool) -> None:
    query = parse_query({"site_id": SITE, "date_range": "7d", **body}, today=TODAY)
    assert fits_aggregates(query) is fits


ONE_VISIT = [
    {"site_id": SITE, "visitor_id": "v1", "type": "pageview", "path": "/x", "event_time": 1_000, "is_bot": False},
    {"site_id": SITE, "visitor_id": "v1", "type": "engagement", "path": "/x", "event_time": 9_000, "is_bot": False},
    {
        "site_id": SITE,
        "visitor_id": "v1",
        "type": "event",
        "name": "signup",
        "path": "/x",
        "event_time": 9_500,
        "is_bot": False,
    },
    {"site_id": SITE, "visitor_id": "v2", "type": "pageview", "path": "/y", "event_time": 2_000, "is_bot": False},
    {"site_id": SITE, "visitor_id": "v2", "type": "engagement", "path": "/y", "event_time": 3_000, "is_bot": False},
]


def one_visit_sources() -> RawOnly:
    day = dt.datetime.fromtimestamp(0, dt.UTC).date()
    events = [{**e, "event_date": day, "event_id": f"o{i}"} for i, e in enumerate(ONE_VISIT)]
    return RawOnly(events)


@pytest.mark.parametrize(
    ("filters", "visits"),
    [
        ([["is", "event:page", ["/x"]]], 1),
        ([["is_not", "event:page", ["/x"]]], 1),  # v2's visit; never v1's beacon or custom event
        ([["not", ["is", "event:page", ["/x"]]]], 1),
        ([["not", ["or", [["is", "event:page", ["/x"]], ["is", "event:page", ["/y"]]]]]], 0),
    ],
)
def test_a_page_filter_on_visits_reads_their_page_views_only(filters: list[Any], visits: int) -> None:
    sources = one_visit_sources()
    answer = sources.exact_query.answer(
        Query(
            SITE,
            dt.date(1970, 1, 1),
            dt.date(1970, 1, 1),
            ("visits",),
            filters=tuple(parse_filter(f, "f") for f in filters),
        )
    )
    assert answer[0]["metrics"]["visits"] == visits if answer else visits == 0


def test_an_event_name_filter_never_counts_engagement_beacons() -> None:
    sources = one_visit_sources()
    custom = Filter("is_not", dimension="event:name", values=("pageview",))
    rows = sources.exact_query.answer(
        Query(SITE, dt.date(1970, 1, 1), dt.date(1970, 1, 1), ("visitors",), filters=(custom,))
    )
    assert rows[0]["metrics"]["visitors"] == 1, "only v1 sent a custom event"


def test_a_goal_contains_filter_over_thousands_of_event_names_is_one_bound_list() -> None:
    day = dt.date(2026, 11, 20)
    at = int(dt.datetime.combine(day, dt.time(12), dt.UTC).timestamp() * 1000)
    events = [
        {
            "site_id": SITE,
            "visitor_id": f"v{i}",
            "type": "event",
            "name": f"name-{i}",
            "path": "/",
            "event_time": at,
            "event_date": day,
            "is_bot": False,
            "event_id": f"g{i}",
        }
        for i in range(5000)
    ]
    query = parse_query(
        {
            "site_id": SITE,
            "date_range": [day.isoformat(), day.isoformat()],
            "metrics": ["visitors", "events"],
            "filters": [["contains", "event:goal", ["", "name"]]],
        },
        today=TODAY,
    )
    ((row),) = RawOnly(events).exact_query.answer(query)
    assert row["metrics"] == {"visitors": 5000, "events": 5000}


def test_a_date_time_range_compares_with_as_long_just_before() -> None:
    first = dt.datetime.combine(START + dt.timedelta(days=10), dt.time(6), dt.UTC)
    body = {
        "metrics": ["pageviews"],
        "date_range": [first.isoformat(), (first + dt.timedelta(hours=12)).isoformat()],
        "include": {"compare": "previous_period"},
    }
    answer = ask(body)
    since = (first - dt.timedelta(hours=12, seconds=1)).timestamp() * 1000
    until = first.timestamp() * 1000
    before = sum(1 for e in LIVE if e["type"] == "pageview" and since <= e["event_time"] < until)
    assert answer.results[0]["comparison"]["metrics"] == [before]
    assert answer.meta["comparison_date_range"][1] == first.isoformat()


@pytest.mark.parametrize(
    ("body", "part"),
    [
        ({"metrics": ["visitors"], "filters": [["is", "event:page", ["\ud800"]]]}, "body"),
        ({"metrics": ["visitors"], "dimensions": ["event:props:a\u0000b"]}, "dimensions"),
        ({"metrics": ["visitors"], "date": "0001-01-02", "date_range": "7d"}, "date"),
        ({"metrics": ["visitors"], "date_range": ["9999-12-30", "9999-12-31"]}, "date_range[0]"),
        (
            {
                "metrics": ["visitors"],
                "date_range": ["0001-01-01", "0001-01-03"],
                "include": {"compare": "previous_period"},
            },
            "date_range[0]",
        ),
    ],
)
def test_hostile_bodies_are_refused_naming_the_part_not_crashing(body: dict[str, Any], part: str) -> None:
    with pytest.raises(QueryError) as refused:
        ask(body)
    assert refused.value.part == part


def test_a_raw_table_written_before_region_and_city_answers_them_as_none() -> None:
    older = [{k: v for k, v in e.items() if k not in ("region", "city")} for e in EVENTS]
    columns = {k: v for k, v in COLUMNS.items() if k not in ("region", "city")}
    rows = {name: [e.get(name) for e in older] for name in columns}
    rows["props"] = [list((e.get("props") or {}).items()) for e in older]
    sources = RawOnly([])
    sources.exact_query = ExactQuery(ds.dataset(pa.table(rows, schema=pa.schema(columns))), SITE, GAP_MS)
    answer = ask({"metrics": ["pageviews"], "dimensions": ["visit:city", "visit:country"]}, sources)
    assert {r["dimensions"][0] for r in answer.results} == {"(none)"}
    assert sum(r["metrics"][0] for r in answer.results) == sum(e["type"] == "pageview" for e in LIVE)


def test_load_percentiles_are_exact_when_asked_and_the_drill_down_totals_ask_for_them() -> None:
    """A question that names no percentile skips their quantiles (most of a top table's cost);
    one that names them, and the dashboard's drill-down totals, get them exact."""
    loads: list[int] = sorted(e["load_ms"] for e in LIVE if e["type"] == "pageview" and e["country"] == "DE")

    def quantile(q: float) -> float:  # DuckDB's quantile_cont: linear between the two nearest ranks
        at = q * (len(loads) - 1)
        low = int(at)
        return loads[low] + (loads[min(low + 1, len(loads) - 1)] - loads[low]) * (at - low)

    by_country = {"filters": [["is", "visit:country", ["DE"]]]}
    asked = table(ask({"metrics": ["visitors", "load_p50", "load_p90"], **by_country}))
    assert asked[()][1:] == [round(quantile(0.5)), round(quantile(0.9))]
    query = Query(SITE, START, TODAY, ("visitors",), filters=(Filter("is", dimension="visit:country", values=("DE",)),))
    (row,) = ExactQuery(dataset(EVENTS), SITE, GAP_MS).measure(query)
    assert row["metrics"]["load_p50"] is None and row["metrics"]["visitors"] > 0
    totals = RawQuery(dataset(EVENTS), SITE, Range(START, TODAY), {"country": "DE"}, GAP_MS).totals()
    assert totals.load_ms == pytest.approx(tuple(quantile(q) for q in (0.5, 0.9, 0.99)))
