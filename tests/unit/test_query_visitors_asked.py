"""A question read per question (the Stats API's raw answers) sessionises only the visitors it can
count (query.exact.visitors_condition): every answer is the one sessionising every visitor gives,
whatever the filter (a visit's attribute, entry or exit page, a page, a name, a property, no value,
case, patterns), beside negated ones, goals, and events without a visitor id."""

from __future__ import annotations

import datetime as dt
from typing import Any

import duckdb
import pytest

from query import exact
from query.exact import ExactQuery, visitors_condition
from query.plausible import parse_query
from query.spec import Filter, QueryError
from tests.unit.test_query_exact import GAP_MS, SITE, START, TODAY, dataset, make_events
from tests.unit.test_query_prepared_scan import rows

# The events, two of them without a visitor id (a read takes all such events as one visitor's), and
# a visitor whose two visits came from different sources and countries.
EVENTS = [
    *make_events(),
    *({**e, "visitor_id": None, "event_id": f"{e['event_id']}-nameless"} for e in make_events()[:3]),
    *(
        {
            "site_id": SITE,
            "visitor_id": "moved",
            "type": "pageview",
            "event_id": f"moved-{i}",
            "path": path,
            "source": source,
            "country": country,
            "event_time": int(dt.datetime(2026, 11, 3, 9, tzinfo=dt.UTC).timestamp() * 1000) + minutes * 60_000,
            "event_date": dt.date(2026, 11, 3),
            "is_bot": False,
        }
        for i, (minutes, path, source, country) in enumerate(
            [(0, "/", "google", "DE"), (5, "/pricing", None, "DE"), (90, "/blog/a", None, "FR"), (95, "/", None, "FR")]
        )
    ),
]
VISITS = ["visitors", "visits", "pageviews", "bounce_rate", "visit_duration", "views_per_visit"]
FILTERS: list[list[Any]] = [
    ["is", "visit:country", ["DE"]],
    ["is", "visit:country", ["(none)"]],
    ["is", "visit:source", ["google"]],
    ["contains", "visit:source", ["news"]],
    ["is", "visit:entry_page", ["/pricing"]],
    ["is", "visit:exit_page", ["/signup"]],
    ["is", "event:page", ["/blog/a", "/blog/b"]],
    ["matches", "event:page", ["^/blog/"]],
    ["contains", "event:page", ["PRIC"], {"case_sensitive": False}],
    ["is", "event:name", ["signup"]],
    ["is", "event:props:plan", ["pro"]],
    ["is", "visit:device", ["mobile"]],
]


def question(body: dict[str, Any]) -> Any:
    return parse_query({"site_id": SITE, "date_range": [START.isoformat(), TODAY.isoformat()], **body}, today=TODAY)


def answers(body: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], list[Any]]:
    """The answer sessionising the visitors asked about, and the one sessionising every visitor."""
    asked = question(body)
    engine = ExactQuery(dataset(EVENTS), SITE, GAP_MS)
    narrowed = rows(engine.answer(asked))
    with monkeypatch.context() as patched:
        patched.setattr(exact, "visitors_condition", lambda _filters: None)
        every = rows(engine.answer(asked))
    return narrowed, every


@pytest.mark.parametrize("kept", FILTERS, ids=lambda f: f"{f[0]}-{f[1]}")
@pytest.mark.parametrize(
    "shape",
    [
        {"metrics": VISITS},
        {"metrics": VISITS, "dimensions": ["visit:entry_page"]},
        {"metrics": ["visits", "bounce_rate"], "dimensions": ["visit:source", "time:day"]},
        {"metrics": ["visitors", "visits", "percentage"], "dimensions": ["event:page"]},
        {"metrics": ["visitors", "visits", "conversion_rate"], "dimensions": ["event:goal"]},
    ],
    ids=["totals", "entry", "source-day", "pages", "goals"],
)
def test_an_answer_sessionising_the_visitors_asked_is_the_one_sessionising_every_visitor(
    kept: list[Any], shape: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    filters = [kept, ["is_not", "visit:device", ["tablet"]]]  # a negated filter beside it gives no condition
    narrowed, every = answers({**shape, "filters": filters}, monkeypatch)
    assert narrowed == every


def test_the_condition_keeps_fewer_visitors_and_a_filter_giving_none_sessionises_all() -> None:
    for kept in FILTERS:
        found = visitors_condition(question({"metrics": ["visits"], "filters": [kept]}).filters)
        assert found is not None, kept
        condition, params = found
        with duckdb.connect() as con:
            con.register("e", dataset(EVENTS).to_table())
            matched = con.execute(f"SELECT count(DISTINCT visitor_id) FROM e WHERE {condition}", params).fetchone()
            every = con.execute("SELECT count(DISTINCT visitor_id) FROM e").fetchone()
        assert matched is not None and every is not None and 0 < matched[0] < every[0], kept
    for none in (
        [["is_not", "visit:country", ["DE"]]],
        [["or", [["is", "visit:country", ["DE"]], ["is", "event:page", ["/"]]]]],
        [["not", ["is", "visit:country", ["DE"]]]],
        [["is", "event:goal", ["signup"]]],
    ):
        assert visitors_condition(question({"metrics": ["visits"], "filters": none}).filters) is None, none
    assert visitors_condition((Filter("is", dimension="visit:country", values=("DE",)),)) is not None


@pytest.mark.parametrize(
    "filters",
    [
        [["and", [["is", "visit:country", ["DE"]], ["is", "event:page", ["/pricing"]]]]],
        [["is", "event:goal", ["signup"]], ["is", "visit:country", ["FR"]]],
        [["is_not", "visit:country", ["DE"]]],
    ],
    ids=["and", "goal-then-country", "negated"],
)
def test_compound_goal_and_negated_filters_answer_as_before(
    filters: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    narrowed, every = answers({"metrics": VISITS, "dimensions": ["visit:source"], "filters": filters}, monkeypatch)
    assert narrowed == every and every


def test_a_bad_pattern_in_the_visitors_condition_is_still_a_clear_error() -> None:
    bad = {"metrics": ["visits", "bounce_rate"], "filters": [["matches", "visit:source", ["(x"]]]}
    with pytest.raises(QueryError) as e:
        ExactQuery(dataset(EVENTS), SITE, GAP_MS).answer(question(bad))
    assert e.value.part == "filters" and "regular expression" in str(e.value)
