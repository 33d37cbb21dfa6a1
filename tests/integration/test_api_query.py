"""The Stats API over real tables, called over HTTP as a Plausible v2 client calls it.

Raw events go into raw.pageviews, a real Spark backfill computes every view (the session's shared
``march`` warehouse), the API runs under uvicorn on a free port, and every figure it answers is
compared with a truth computed here from raw.pageviews (pandas; visits with the dashboard's exact
drill-down): exact metrics equal, unique visitors within the 95% bound the answer states.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest
import uvicorn
from deltalake import DeltaTable

from api.app import create_app
from api.budget import RawBudget
from api.keys import create_key, revoke_key
from ops.stack import free_ports
from query.aggregates import Range
from query.raw import RawQuery
from tally.settings import Settings
from tests.integration.views_support import MARCH_FIRST, MARCH_LAST, MARCH_SITE

SITE, OTHER = MARCH_SITE, "limited.tally.test"  # the sites of conf/test.yaml
DAYS = Range(MARCH_FIRST, MARCH_LAST)
WHOLE = ["2026-03-01", "2026-03-04"]


@pytest.fixture(scope="module")
def api(march: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    home = tmp_path_factory.mktemp("api-query")
    port = free_ports(1)[0]
    # The session's shared backfilled tables (read only), with a home of its own for the keys.
    iso = dataclasses.replace(
        march, home=str(home), api=dataclasses.replace(march.api, port=port, requests_per_hour=100_000)
    )
    raw = DeltaTable(iso.table_uri("raw.pageviews")).to_pandas()
    raw = raw[(raw["site_id"] == SITE) & ~raw["is_bot"]]
    now = dt.datetime.now(dt.UTC)
    key, reports = create_key(iso, name="reports", sites=(SITE,), now=now)
    other_key, _ = create_key(iso, name="other site", sites=(OTHER,), now=now)
    fuzz_key, _ = create_key(iso, name="fuzzer", sites=("*",), now=now)
    revoked, record = create_key(iso, name="old", sites=("*",), now=now)
    revoke_key(iso, record.key_id, now=now)
    app = create_app(iso)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the API did not start within 30 s"
        time.sleep(0.05)
    dataset = DeltaTable(iso.table_uri("raw.pageviews")).to_pyarrow_dataset()
    gap_ms = iso.spark.session_gap // dt.timedelta(milliseconds=1)
    try:
        yield {
            "url": f"http://127.0.0.1:{port}/api/v2/query",
            "key": key,
            "key_id": reports.key_id,
            "budget": app.state.answering.budget,  # the server's budget of raw questions
            "other_key": other_key,
            "fuzz_key": fuzz_key,
            "revoked": revoked,
            "raw": raw,
            "drill": RawQuery(dataset, SITE, DAYS, {}, gap_ms),
            "dataset": dataset,
            "gap_ms": gap_ms,
        }
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def ask(api: dict[str, Any], body: dict[str, Any], key: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key or api['key']}"}
    return httpx.post(api["url"], json={"site_id": SITE, "date_range": WHOLE, **body}, headers=headers, timeout=60)


def test_site_totals_equal_the_raw_events_and_visitors_lie_within_the_stated_bound(api: dict[str, Any]) -> None:
    metrics = ["visitors", "visits", "pageviews", "events", "bounce_rate", "visit_duration", "views_per_visit"]
    answer = ask(api, {"metrics": metrics})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    [row] = body["results"]
    got = dict(zip(metrics, row["metrics"], strict=True))
    raw: pd.DataFrame = api["raw"]
    drill = api["drill"].totals()
    assert got["pageviews"] == (raw["type"] == "pageview").sum() > 0
    assert got["events"] == raw["type"].isin(["pageview", "event"]).sum() > got["pageviews"], "as Plausible's"
    assert got["visits"] == drill.visits > 0
    assert got["bounce_rate"] == round(100 * drill.bounces / drill.visits, 1)
    assert got["visit_duration"] == round(drill.duration_ms / drill.visits / 1000)
    assert got["views_per_visit"] == round(drill.visit_pageviews / drill.visits, 2)
    bound = body["meta"]["metrics"]["visitors"]["bound_95"]
    assert 0 < bound < 0.05 and body["meta"]["metrics"]["pageviews"] == {"exact": True}
    assert abs(got["visitors"] - raw["visitor_id"].nunique()) <= bound * got["visitors"] + 1
    assert body["meta"]["source"] == "aggregates" and "daily visitor ids" in body["meta"]["visitors"]
    assert body["query"]["date_range"] == WHOLE


def test_page_views_by_day_equal_the_raw_events_of_each_day(api: dict[str, Any]) -> None:
    answer = ask(api, {"metrics": ["pageviews"], "dimensions": ["time:day"], "include": {"time_labels": True}})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    raw: pd.DataFrame = api["raw"]
    truth = raw[raw["type"] == "pageview"].groupby(raw["event_date"].astype(str)).size()
    assert {r["dimensions"][0]: r["metrics"][0] for r in body["results"]} == truth.to_dict()
    assert [r["dimensions"][0] for r in body["results"]] == sorted(truth.index), "time ascending by default"
    assert body["meta"]["time_labels"] == ["2026-03-01", "2026-03-02", "2026-03-03", "2026-03-04"]


def test_top_pages_page_by_page_with_ordering_pagination_and_total_rows(api: dict[str, Any]) -> None:
    answer = ask(
        api,
        {
            "metrics": ["pageviews", "visitors"],
            "dimensions": ["event:page"],
            "order_by": [["pageviews", "desc"]],
            "include": {"total_rows": True},
            "pagination": {"limit": 3, "offset": 1},
        },
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    raw: pd.DataFrame = api["raw"]
    views = raw[raw["type"] == "pageview"]
    truth = views.groupby("path").size()
    assert body["meta"]["total_rows"] == len(truth)
    ranked = sorted(truth.items(), key=lambda item: (-item[1], item[0]))
    assert [(r["dimensions"][0], r["metrics"][0]) for r in body["results"]] == ranked[1:4]
    bound = body["meta"]["metrics"]["visitors"]["bound_95"]
    for row in body["results"]:
        exact = raw.loc[raw["path"] == row["dimensions"][0], "visitor_id"].nunique()
        assert abs(row["metrics"][1] - exact) <= bound * row["metrics"][1] + 1


def test_sources_with_visit_metrics_equal_the_exact_drill_down(api: dict[str, Any]) -> None:
    answer = ask(api, {"metrics": ["visits", "bounce_rate"], "dimensions": ["visit:source"]})
    assert answer.status_code == 200, answer.text
    truth = api["drill"].top_visits("source", 1000).set_index("value")
    got = {r["dimensions"][0]: r["metrics"] for r in answer.json()["results"]}
    assert set(got) == set(truth.index)
    for value, (visits, bounce_rate) in got.items():
        assert visits == truth.loc[value, "visits"]
        assert bounce_rate == round(100 * truth.loc[value, "bounce_rate"], 1)


def test_a_filtered_query_is_answered_exactly_from_raw_events(api: dict[str, Any]) -> None:
    raw: pd.DataFrame = api["raw"]
    page = raw.loc[raw["type"] == "pageview", "path"].value_counts().index[0]
    answer = ask(api, {"metrics": ["visitors", "pageviews"], "filters": [["is", "event:page", [page]]]})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["meta"]["source"] == "raw" and body["meta"]["metrics"]["visitors"]["exact"] is True
    on_page = raw[raw["path"] == page]
    assert body["results"][0]["metrics"] == [
        on_page["visitor_id"].nunique(),
        int((on_page["type"] == "pageview").sum()),
    ]


def results(answer: httpx.Response) -> dict[tuple[str, ...], list[Any]]:
    assert answer.status_code == 200, answer.text
    return {tuple(r["dimensions"]): r["metrics"] for r in answer.json()["results"]}


def event_counts(frame: pd.DataFrame, keys: list[str]) -> dict[tuple[str, ...], list[int]]:
    """Visitors and page views per group of ``keys`` (missing values as "(none)"), from raw events."""
    frame = frame.assign(**{k: frame[k].fillna("(none)") for k in keys})
    grouped = frame.groupby(keys)
    visitors = grouped["visitor_id"].nunique()
    views = grouped["type"].agg(lambda t: int((t == "pageview").sum()))
    return {
        tuple(str(v) for v in (k if isinstance(k, tuple) else (k,))): [int(visitors[k]), int(views[k])]
        for k in visitors.index
    }


def test_plausible_docs_breakdown_by_two_dimensions_with_a_contains_filter(api: dict[str, Any]) -> None:
    raw: pd.DataFrame = api["raw"]
    got = results(
        ask(
            api,
            {
                "metrics": ["visitors", "pageviews"],
                "dimensions": ["event:page", "visit:device"],
                "filters": [["contains", "event:page", ["/blog"]]],
            },
        )
    )
    assert got and got == event_counts(raw[raw["path"].str.contains("/blog", regex=False)], ["path", "device"])


def test_plausible_docs_goal_conversions_equal_the_raw_events(api: dict[str, Any]) -> None:
    raw: pd.DataFrame = api["raw"]
    body = ask(api, {"metrics": ["visitors", "events", "conversion_rate"], "dimensions": ["event:goal"]})
    got = results(body)
    everyone = raw["visitor_id"].nunique()
    custom = raw[raw["type"] == "event"]
    assert set(got) == {(n,) for n in custom["name"].unique()}, "no goals configured: each custom event name is one"
    for (name,), (visitors, events, rate) in got.items():
        hits = custom[custom["name"] == name]
        assert (visitors, events) == (hits["visitor_id"].nunique(), len(hits))
        assert rate == round(100 * hits["visitor_id"].nunique() / everyone, 2)
    assert body.json()["meta"]["source"] == "raw"


def test_plausible_docs_props_breakdown_under_a_goal_filter(api: dict[str, Any]) -> None:
    raw: pd.DataFrame = api["raw"]
    got = results(
        ask(
            api,
            {
                "metrics": ["visitors", "events"],
                "dimensions": ["event:props:plan"],
                "filters": [["is", "event:goal", ["signup"]]],
            },
        )
    )
    signups = raw[(raw["type"] == "event") & (raw["name"] == "signup")]
    plans = signups["props"].map(lambda p: dict(p or [])["plan"])
    truth = {
        (plan,): [signups.loc[plans == plan, "visitor_id"].nunique(), int((plans == plan).sum())] for plan in set(plans)
    }
    assert got == truth


def test_a_props_breakdown_of_one_event_is_answered_from_the_props_view(api: dict[str, Any]) -> None:
    answer = ask(
        api,
        {
            "metrics": ["visitors", "events"],
            "dimensions": ["event:props:plan"],
            "filters": [["is", "event:name", ["download"]]],
        },
    )
    got = results(answer)
    meta = answer.json()["meta"]
    assert meta["source"] == "aggregates" and "agg.props_1d" in meta["props"]
    raw: pd.DataFrame = api["raw"]
    downloads = raw[(raw["type"] == "event") & (raw["name"] == "download")]
    plans = downloads["props"].map(lambda p: dict(p or [])["plan"])
    assert set(got) == {(plan,) for plan in set(plans)}
    bound = meta["metrics"]["visitors"]["bound_95"]
    for (plan,), (visitors, events) in got.items():
        assert events == int((plans == plan).sum())
        exact = downloads.loc[plans == plan, "visitor_id"].nunique()
        assert abs(visitors - exact) <= bound * visitors + 1


def test_top_pages_under_a_path_are_the_aggregate_rows_the_filter_keeps(api: dict[str, Any]) -> None:
    answer = ask(
        api,
        {
            "metrics": ["visitors", "pageviews"],
            "dimensions": ["event:page"],
            "filters": [["matches", "event:page", ["^/blog"]], ["is_not", "event:page", ["/blog"]]],
        },
    )
    got = results(answer)
    assert answer.json()["meta"]["source"] == "aggregates"
    raw: pd.DataFrame = api["raw"]
    truth = event_counts(raw[raw["path"].str.startswith("/blog") & (raw["path"] != "/blog")], ["path"])
    assert set(got) == set(truth) and truth
    bound = answer.json()["meta"]["metrics"]["visitors"]["bound_95"]
    for key, (visitors, views) in got.items():
        assert views == truth[key][1]
        assert abs(visitors - truth[key][0]) <= bound * visitors + 1


def test_a_weekly_series_with_a_comparison_lists_every_week_with_its_earlier_figures(api: dict[str, Any]) -> None:
    answer = ask(
        api,
        {
            "metrics": ["pageviews"],
            "dimensions": ["time:week"],
            "include": {"compare": "previous_period"},
            "filters": [["is_not", "event:page", ["/nowhere"]]],
        },
    )
    got = answer.json()
    assert answer.status_code == 200, answer.text
    raw: pd.DataFrame = api["raw"]
    views = raw[raw["type"] == "pageview"]
    days = pd.to_datetime(views["event_time"], unit="ms").dt.date
    # 2026-03-01 is a Sunday: its week starts on Monday 02-23, before the range, so it is labelled 03-01
    first = int((days == dt.date(2026, 3, 1)).sum())
    assert [r["dimensions"] for r in got["results"]] == [["2026-03-01"], ["2026-03-02"]]
    assert [r["metrics"][0] for r in got["results"]] == [first, len(views) - first]
    assert got["meta"]["comparison_date_range"] == ["2026-02-25", "2026-02-28"]
    for row in got["results"]:
        assert row["comparison"]["metrics"] == [0] and row["comparison"]["change"] == [100]


# The query bodies of Plausible's public docs (plausible/docs, src/js/apiv2-examples/*-query.json),
# with the site and range of this data set; a property this data has (plan, not is_customer).
def docs_example(name: str) -> dict[str, Any]:
    examples: dict[str, dict[str, Any]] = {
        "aggregate": {"metrics": ["visitors", "events"]},
        "custom-properties": {
            "metrics": ["visitors"],
            "dimensions": ["time:day", "event:props:plan"],
            "order_by": [["time:day", "asc"], ["event:props:plan", "desc"]],
        },
        "utm": {"metrics": ["visitors", "events", "pageviews"], "dimensions": ["visit:utm_medium", "visit:utm_source"]},
        "time-labels": {
            "metrics": ["visitors"],
            "date_range": ["2026-03-02", "2026-03-02"],
            "dimensions": ["time:hour"],
            "include": {"time_labels": True},
        },
        "filtering-case-insensitive": {
            "metrics": ["visitors"],
            "filters": [["contains", "event:page", ["BLOG"], {"case_sensitive": False}]],
        },
        "pagination": {
            "metrics": ["visitors", "events", "pageviews"],
            "dimensions": ["visit:source", "visit:device"],
            "include": {"total_rows": True},
            "pagination": {"limit": 3, "offset": 1},
        },
    }
    return examples[name]


def test_plausible_docs_examples_equal_the_raw_events(api: dict[str, Any]) -> None:
    raw: pd.DataFrame = api["raw"]
    counted = raw["type"].isin(["pageview", "event"])
    got = results(ask(api, docs_example("aggregate")))
    bound = 0.05  # HLL (lg_k 14, ±1.6%): far inside at this size; the exact bound is checked in the totals test
    ((visitors, events),) = got.values()
    assert events == counted.sum() and abs(visitors - raw["visitor_id"].nunique()) <= bound * visitors

    answer = ask(api, docs_example("custom-properties")).json()
    plan = raw["props"].map(lambda p: dict(p or []).get("plan", "(none)"))
    day = pd.to_datetime(raw["event_time"], unit="ms").dt.strftime("%Y-%m-%d")
    truth = raw.assign(plan=plan, day=day).groupby(["day", "plan"])["visitor_id"].nunique()
    rows = [(tuple(r["dimensions"]), r["metrics"][0]) for r in answer["results"]]
    assert dict(rows) == {k: int(v) for k, v in truth.items()}
    assert [k for k, _ in rows] == sorted(sorted(truth.index, key=lambda k: k[1], reverse=True), key=lambda k: k[0])

    got = results(ask(api, docs_example("utm")))
    assert got == {
        ("(none)", "(none)"): [raw["visitor_id"].nunique(), int(counted.sum()), int((raw["type"] == "pageview").sum())]
    }

    answer = ask(api, docs_example("time-labels")).json()
    hour = pd.to_datetime(raw["event_time"], unit="ms")
    on_day = raw[hour.dt.date == dt.date(2026, 3, 2)]
    truth = on_day.groupby(hour[on_day.index].dt.strftime("%Y-%m-%d %H:00:00"))["visitor_id"].nunique()
    assert {r["dimensions"][0]: r["metrics"][0] for r in answer["results"]} == pytest.approx(dict(truth), rel=0.05)
    assert len(answer["meta"]["time_labels"]) == 24 and answer["meta"]["time_labels"][0] == "2026-03-02 00:00:00"

    got = results(ask(api, docs_example("filtering-case-insensitive")))
    assert got == {(): [raw.loc[raw["path"].str.lower().str.contains("blog"), "visitor_id"].nunique()]}

    answer = ask(api, docs_example("pagination")).json()
    frame = raw.assign(source=raw["source"].fillna("(none)"))
    grouped = frame.groupby(["source", "device"])
    full = sorted(
        (
            (k, [int(v), int(counted[g.index].sum()), int((g["type"] == "pageview").sum())])
            for (k, v), (_, g) in zip(grouped["visitor_id"].nunique().items(), grouped, strict=True)
        ),
        key=lambda kv: kv[0],
    )
    full.sort(key=lambda kv: kv[1][0], reverse=True)  # visitors descending, ties by the dimensions
    assert answer["meta"]["total_rows"] == len(full)
    assert [(tuple(r["dimensions"]), r["metrics"]) for r in answer["results"]] == full[1:4]


@pytest.mark.parametrize(
    ("example", "part", "message"),
    [
        (  # country-and-city-query.json: Tally has no country or city names (yet)
            {
                "metrics": ["visitors", "pageviews", "bounce_rate"],
                "filters": [["is_not", "visit:country_name", [""]]],
                "dimensions": ["visit:country_name", "visit:city_name"],
            },
            "dimensions",
            "dimension 'visit:country_name' is not supported",
        ),
        (  # behavioral-filters-query.json
            {
                "metrics": ["visitors"],
                "date_range": "all",
                "filters": [["is", "event:goal", ["Signup"]], ["has_done", ["is", "event:page", ["/pricing"]]]],
            },
            "filters[1]",
            "filter operator 'has_done' is not supported",
        ),
        (  # filtering-basics-query.json
            {
                "metrics": ["visitors"],
                "filters": [
                    ["contains", "event:page", ["/docs", "/pricing"]],
                    ["is", "visit:country_name", ["Estonia", "United States of America"]],
                ],
            },
            "filters[1]",
            "dimension 'visit:country_name' is not supported in filters",
        ),
    ],
)
def test_plausible_docs_examples_tally_cannot_answer_name_the_part(
    api: dict[str, Any], example: dict[str, Any], part: str, message: str
) -> None:
    answer = ask(api, example)
    assert answer.status_code == 400 and message in answer.json()["error"], answer.text
    assert answer.json()["part"] == part


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"metrics": ["total_revenue"]}, 400, "metric 'total_revenue' is not supported"),
        ({"metrics": ["visitors"], "site_id": "nowhere.test"}, 403, "may not read site"),
        ({"metrics": ["visitors"], "site_id": OTHER}, 403, "may not read site"),
        ({"metrics": ["visitors"], "pagination": {"limit": 10**7}}, 400, "pagination.limit"),
        ({"metrics": ["visitors"], "date_range": ["2020-01-01", "2026-03-01"]}, 400, "at most 400 days"),
        (
            {"metrics": ["visitors"], "dimensions": ["visit:city_name"]},
            400,
            "dimension 'visit:city_name' is not supported",
        ),
        ({"metrics": ["visitors"], "filters": [["matches", "event:page", ["(x"]]]}, 400, "regular expression"),
        ({"metrics": ["conversion_rate"]}, 400, "needs an event:goal"),
    ],
)
def test_what_cannot_be_answered_gets_a_clear_4xx(
    api: dict[str, Any], body: dict[str, Any], status: int, message: str
) -> None:
    answer = ask(api, body)
    assert answer.status_code == status and message in answer.json()["error"], answer.text


def test_keys_are_checked_before_anything_is_read(api: dict[str, Any]) -> None:
    body = {"metrics": ["visitors"]}
    for key, status in ((api["revoked"], 401), ("tly_000000000000_" + "x" * 43, 401), (api["other_key"], 403)):
        assert ask(api, body, key).status_code == status
    unknown = ask(api, {**body, "site_id": "nowhere.test"}, api["fuzz_key"])  # a key for every site
    assert unknown.status_code == 400 and "not configured" in unknown.json()["error"]
    anonymous = httpx.post(api["url"], json={"site_id": SITE, "date_range": "7d", **body}, timeout=30)
    assert anonymous.status_code == 401 and "Authorization: Bearer" in anonymous.json()["error"]
    garbage = httpx.post(
        api["url"], content=b"{not json", headers={"Authorization": f"Bearer {api['key']}"}, timeout=30
    )
    assert garbage.status_code == 400 and garbage.json()["error"] == "the request body is not valid JSON"


def test_a_key_at_its_share_of_raw_questions_gets_429_while_another_keys_is_answered_from_raw_events(
    api: dict[str, Any],
) -> None:
    budget: RawBudget = api["budget"]
    filtered = {"metrics": ["visitors", "pageviews"], "filters": [["is", "visit:country", ["DE"]]]}
    with ExitStack() as running:
        for _ in range(budget.per_key):  # the reports key's questions, as if they were running
            running.enter_context(budget.hold(api["key_id"]))
        refused = ask(api, filtered)  # after waiting api.raw_wait_seconds for a slot of its key's
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0, refused.text
        assert "api.raw_slots_per_key" in refused.json()["error"]
        other = ask(api, filtered, api["fuzz_key"])
        assert other.status_code == 200 and other.json()["meta"]["source"] == "raw", other.text
        views = ask(api, {"metrics": ["pageviews"]})
        assert views.status_code == 200 and views.json()["meta"]["source"] == "aggregates", "no slot needed"
    again = ask(api, filtered)
    assert again.status_code == 200 and again.json()["results"] == other.json()["results"]


def test_schemathesis_finds_no_server_error(api: dict[str, Any], tmp_path: Path) -> None:
    """Fuzzed from the served OpenAPI schema, with a key of its own: every answer is a documented 2xx/4xx."""
    base = api["url"].removesuffix("/api/v2/query")
    command = [sys.executable, "-m", "schemathesis.cli", "run", f"{base}/openapi.json", "--url", base]
    command += ["-H", f"Authorization: Bearer {api['fuzz_key']}", "--max-examples", "100", "--seed", "7"]
    command += ["--checks", "not_a_server_error,status_code_conformance,content_type_conformance", "--no-color"]
    run = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stdout[-4000:]
