"""Plausible v2 request bodies read into queries; whatever Tally cannot answer is refused by name."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from query.plausible import parse_date_range, parse_query
from query.spec import Filter, QueryError

TODAY = dt.date(2026, 11, 25)


def body(**parts: Any) -> dict[str, Any]:
    return {"site_id": "demo.tally.local", "metrics": ["visitors"], "date_range": "7d", **parts}


@pytest.mark.parametrize(
    ("shortcut", "start"),
    [
        ("day", TODAY),
        ("7d", dt.date(2026, 11, 19)),
        ("28d", dt.date(2026, 10, 29)),
        ("30d", dt.date(2026, 10, 27)),
        ("91d", dt.date(2026, 8, 27)),
        ("month", dt.date(2026, 11, 1)),
        ("6mo", dt.date(2026, 6, 1)),
        ("12mo", dt.date(2025, 12, 1)),
        ("year", dt.date(2026, 1, 1)),
    ],
)
def test_each_range_shortcut_ends_today_and_starts_where_plausible_starts_it(shortcut: str, start: dt.date) -> None:
    assert parse_date_range(shortcut, today=TODAY) == (start, TODAY)


def test_a_pair_of_dates_is_an_inclusive_range_and_a_backwards_or_huge_one_is_refused() -> None:
    assert parse_date_range(["2026-01-01", "2026-01-31"], today=TODAY) == (dt.date(2026, 1, 1), dt.date(2026, 1, 31))
    for bad, message in (
        (["2026-02-01", "2026-01-01"], "ends before it starts"),
        (["2020-01-01", "2026-01-01"], "at most 400 days"),
        (["2026-01-01", "tomorrow"], "not an ISO date"),
        ("fortnight", "not one of"),
        (7, "a shortcut"),
    ):
        with pytest.raises(QueryError, match=message):
            parse_date_range(bad, today=TODAY)


def test_a_full_query_is_read_with_plausibles_defaults() -> None:
    query = parse_query(
        body(metrics=["pageviews", "visitors"], dimensions=["event:page"], pagination={"limit": 5, "offset": 10}),
        today=TODAY,
    )
    assert query.metrics == ("pageviews", "visitors")
    assert query.order_by == (("pageviews", True),), "by the first metric, descending"
    assert (query.limit, query.offset) == (5, 10)
    assert parse_query(body(dimensions=["time:day"]), today=TODAY).order_by == (("time:day", False), ("visitors", True))


@pytest.mark.parametrize(
    ("parts", "part", "message"),
    [
        ({"metrics": ["total_revenue"]}, "metrics", "metric 'total_revenue' is not supported"),
        ({"metrics": []}, "metrics", "non-empty list"),
        ({"metrics": "visitors"}, "metrics", "must be a list"),
        ({"dimensions": ["visit:city_name"]}, "dimensions", "dimension 'visit:city_name' is not supported"),
        ({"dimensions": ["event:page", "event:page"]}, "dimensions", "listed twice"),
        ({"dimensions": ["time:day", "time:week"]}, "dimensions", "at most one time dimension"),
        ({"dimensions": ["event:props:"]}, "dimensions", "is not supported"),
        ({"metrics": ["conversion_rate"]}, "metrics", "needs an event:goal"),
        ({"metrics": ["percentage"]}, "metrics", "needs at least one dimension"),
        ({"site_id": ""}, "site_id", "site_id is required"),
        ({"pagination": {"limit": 10**9}}, "pagination", "between 1 and 10000"),
        ({"pagination": {"limit": True}}, "pagination", "whole number"),
        ({"order_by": [["pageviews", "desc"]]}, "order_by", "not among the query's metrics"),
        ({"order_by": [["visitors", "sideways"]]}, "order_by", "asc"),
        ({"include": {"compare": "last_decade"}}, "include", "previous_period, year_over_year"),
        ({"include": {"compare": ["2026-02-01", "2026-01-01"]}}, "include", "start first"),
        ({"date_range": ["2026-01-01", "2026-01-02T00:00:00Z"]}, "date_range", "not one of each"),
        ({"include": {"imports": "yes"}}, "include", "true or false"),
        ({"filters": [["has_done", "event:goal", ["Signup"]]]}, "filters[0]", "operator 'has_done'"),
        ({"filters": [["is", "time:day", ["2026-01-01"]]]}, "filters[0]", "not supported in filters"),
        ({"filters": [["is", "event:page", []]]}, "filters[0]", "non-empty list of strings"),
        ({"filters": "event:page==/"}, "filters", "must be a list"),
        ({"limit": 5}, "limit", "not part of a query"),
    ],
)
def test_what_tally_cannot_answer_is_refused_naming_the_part(parts: dict[str, Any], part: str, message: str) -> None:
    with pytest.raises(QueryError, match=message) as refused:
        parse_query(body(**parts), today=TODAY)
    assert refused.value.part == part


def test_a_body_that_is_not_an_object_is_refused() -> None:
    bad: Any
    for bad in ([], "query", 3, None):
        with pytest.raises(QueryError, match="JSON object"):
            parse_query(bad, today=TODAY)


def test_filters_nest_and_keep_their_operators_and_modifiers() -> None:
    query = parse_query(
        body(
            filters=[
                ["is", "visit:country", ["DE"]],
                ["or", [["contains", "event:page", ["/blog"]], ["not", ["matches", "event:props:plan", ["^p"]]]]],
                ["is", "visit:device", ["Mobile"], {"case_sensitive": False}],
            ]
        ),
        today=TODAY,
    )
    assert query.filters[0] == Filter("is", dimension="visit:country", values=("DE",))
    assert query.filters[1].op == "or" and query.filters[1].children[1].children[0].dimension == "event:props:plan"
    assert query.filters[2].case_sensitive is False


def test_comparisons_and_date_time_ranges_are_read_as_plausible_defines_them() -> None:
    query = parse_query(body(date_range="7d", include={"compare": "previous_period"}), today=TODAY)
    assert query.compare == (dt.date(2026, 11, 12), dt.date(2026, 11, 18))
    query = parse_query(body(date_range="month", include={"compare": "year_over_year"}), today=TODAY)
    assert query.compare == (dt.date(2025, 11, 1), dt.date(2025, 11, 25))
    query = parse_query(body(date_range=["2026-11-24T12:00:00Z", "2026-11-25T05:59:59+00:00"]), today=TODAY)
    assert (query.start, query.end) == (dt.date(2026, 11, 24), dt.date(2026, 11, 25))
    assert query.between is not None and query.between[1] - query.between[0] == dt.timedelta(hours=18)
    query = parse_query(
        body(date_range=["2024-01-01 12:00:00", "2024-01-01 15:59:59"]), today=TODAY
    )  # Plausible's docs
    assert query.between == (
        dt.datetime(2024, 1, 1, 12, tzinfo=dt.UTC),
        dt.datetime(2024, 1, 1, 16, tzinfo=dt.UTC),
    ), "the last second is inside the range"
    now = dt.datetime(2026, 11, 25, 10, tzinfo=dt.UTC)
    query = parse_query(body(date_range="24h"), today=TODAY, now=now)
    assert query.between == (now - dt.timedelta(hours=24), now)
