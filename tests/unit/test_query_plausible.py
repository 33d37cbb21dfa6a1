"""Plausible v2 request bodies read into queries; whatever Tally cannot answer is refused by name."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from query.engine import raw_filters
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
        (["2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"], "date-time ranges are not supported yet"),
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
    assert parse_query(body(dimensions=["time:day"]), today=TODAY).order_by == (("time:day", False),)


@pytest.mark.parametrize(
    ("parts", "part", "message"),
    [
        ({"metrics": ["total_revenue"]}, "metrics", "metric 'total_revenue' is not supported"),
        ({"metrics": []}, "metrics", "non-empty list"),
        ({"metrics": "visitors"}, "metrics", "must be a list"),
        ({"dimensions": ["visit:city"]}, "dimensions", "dimension 'visit:city' is not supported"),
        ({"dimensions": ["event:page", "visit:source"]}, "dimensions", "more than one dimension"),
        ({"metrics": ["percentage"]}, "metrics", "needs at least one dimension"),
        ({"site_id": ""}, "site_id", "site_id is required"),
        ({"pagination": {"limit": 10**9}}, "pagination", "between 1 and 10000"),
        ({"pagination": {"limit": True}}, "pagination", "whole number"),
        ({"order_by": [["pageviews", "desc"]]}, "order_by", "not among the query's metrics"),
        ({"order_by": [["visitors", "sideways"]]}, "order_by", "asc"),
        ({"include": {"compare": "previous_period"}}, "include", "compare is not supported yet"),
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


def test_filters_nest_and_the_raw_drill_down_takes_is_filters_combined_by_and() -> None:
    query = parse_query(
        body(
            filters=[
                ["is", "visit:country", ["DE"]],
                ["and", [["is", "event:page", ["/pricing"]], ["is", "visit:device", ["mobile"]]]],
            ]
        ),
        today=TODAY,
    )
    assert query.filters[0] == Filter("is", dimension="visit:country", values=("DE",))
    assert raw_filters(query.filters) == {"country": "DE", "page": "/pricing", "device": "mobile"}


@pytest.mark.parametrize(
    ("filters", "message"),
    [
        ([["is", "visit:country", ["DE", "FR"]]], "only 'is' with one value"),
        ([["contains", "event:page", ["/blog"]]], "filter 'contains' is not supported yet"),
        ([["or", [["is", "visit:country", ["DE"]]]]], "filter 'or' is not supported yet"),
        ([["is", "visit:os", ["Linux"]]], "a filter on 'visit:os' is not supported yet"),
        ([["is", "visit:country", ["DE"]], ["is", "visit:country", ["FR"]]], "can never both hold"),
    ],
)
def test_filters_the_raw_drill_down_cannot_apply_are_refused_not_ignored(filters: list[Any], message: str) -> None:
    query = parse_query(body(filters=filters), today=TODAY)
    with pytest.raises(QueryError, match=message):
        raw_filters(query.filters)
