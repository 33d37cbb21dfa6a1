"""``tally mcp`` driven by the MCP SDK's own client, over stdio, as Claude Desktop launches it.

A small ``raw.pageviews`` table is written with delta-rs (no Spark, no broker), keys are made
with :mod:`api.keys`, and ``python -m tally mcp`` runs as a subprocess of
``mcp.client.stdio.stdio_client`` with its own Tally home. Filtered questions are answered from
raw events, exactly, so every figure is compared with a truth computed here with pandas; the
unfiltered answer is compared with what ``POST /api/v2/query`` answers to the same body.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pandas as pd
import pytest
from deltalake import DeltaTable, write_deltalake
from mcp import ClientSession
from mcp.types import CallToolResult
from starlette.testclient import TestClient

from api.app import create_app
from api.keys import create_key, revoke_key
from simulator.synthetic import synthetic_events
from tally.settings import PROJECT_ROOT, Settings, load_settings
from tests.support.mcp_client import text
from tests.support.mcp_client import with_session as mcp_session

SITE, OTHER = "demo.tally.local", "limited.tally.test"  # the sites of conf/test.yaml
WHOLE = ["2026-03-01", "2026-03-03"]
T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Tally:
    """An isolated Tally home with raw events, and the environment that points ``tally mcp`` at it."""

    settings: Settings
    env: dict[str, str]
    raw: pd.DataFrame  # the site's human events, the truth every filtered answer is compared with

    def key(self, *sites: str) -> str:
        key, _ = create_key(self.settings, name="mcp test", sites=sites, now=dt.datetime.now(dt.UTC))
        return key


@pytest.fixture(scope="module")
def tally(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tally]:
    home = tmp_path_factory.mktemp("mcp-home")
    env = {"TALLY_ENV": "test", "TALLY_HOME": str(home), "PYTHONPATH": str(PROJECT_ROOT)}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        patch.delenv("TALLY_WAREHOUSE__PATH", raising=False)
        settings = load_settings()
    start = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    events = synthetic_events(visits=120, start=start, span=dt.timedelta(days=3), site_id=SITE, seed=5)
    write_deltalake(settings.table_uri("raw.pageviews"), events, mode="append", partition_by=["event_date"])
    raw = DeltaTable(settings.table_uri("raw.pageviews")).to_pandas()
    yield Tally(settings, env, raw[(raw["site_id"] == SITE) & ~raw["is_bot"]])


def with_session(tally: Tally, key: str, scenario: Callable[[ClientSession], Awaitable[T]]) -> T:
    """Run ``scenario`` against ``tally mcp`` started by the SDK's stdio client with ``key``."""
    return mcp_session(tally.env, key, scenario)


def query(body: dict[str, Any]) -> dict[str, Any]:
    return {"site_id": SITE, "date_range": WHOLE, **body}


def test_the_server_lists_the_query_and_list_sites_tools_with_the_query_body_schema(tally: Tally) -> None:
    async def scenario(client: ClientSession) -> None:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(listed) == {"query", "list_sites"}
        assert listed["query"].input_schema["required"] == ["site_id", "metrics", "date_range"]
        assert listed["query"].output_schema is not None and "results" in listed["query"].output_schema["required"]

    with_session(tally, tally.key(SITE), scenario)


def test_list_sites_shows_only_the_sites_of_the_key(tally: Tally) -> None:
    async def scenario(client: ClientSession) -> Any:
        result = await client.call_tool("list_sites", {})
        assert not result.is_error, text(result)
        return result.structured_content

    one = with_session(tally, tally.key(SITE), scenario)
    assert one == {"sites": [{"site_id": SITE, "domains": ["demo.tally.local", "localhost", "127.0.0.1"]}]}
    every = with_session(tally, tally.key("*"), scenario)
    assert [s["site_id"] for s in every["sites"]] == [SITE, OTHER]


def test_a_filtered_query_answers_the_exact_figures_of_the_raw_events(tally: Tally) -> None:
    raw = tally.raw
    page = raw.loc[raw["type"] == "pageview", "path"].value_counts().index[0]
    on_page = raw[raw["path"] == page]
    filters = [["is", "event:page", [page]]]

    async def scenario(client: ClientSession) -> tuple[CallToolResult, CallToolResult]:
        totals = await client.call_tool("query", query({"metrics": ["visitors", "pageviews"], "filters": filters}))
        by_day = query({"metrics": ["pageviews"], "dimensions": ["time:day"], "filters": filters})
        return totals, await client.call_tool("query", by_day)

    totals, by_day = with_session(tally, tally.key(SITE), scenario)
    assert not totals.is_error and not by_day.is_error, text(totals) + text(by_day)
    answer = totals.structured_content
    assert answer["meta"]["source"] == "raw" and answer["meta"]["metrics"]["visitors"]["exact"] is True
    views = on_page[on_page["type"] == "pageview"]
    assert len(views) > 0 and on_page["visitor_id"].nunique() > 0, "the test data must have page views on the page"
    assert answer["results"] == [{"dimensions": [], "metrics": [on_page["visitor_id"].nunique(), len(views)]}]
    assert answer["query"]["date_range"] == WHOLE and answer["query"]["filters"] == filters
    truth = views.groupby(views["event_date"].astype(str)).size().to_dict()
    assert {r["dimensions"][0]: r["metrics"][0] for r in by_day.structured_content["results"]} == truth


def test_the_query_tool_answers_the_same_json_as_the_http_api(tally: Tally) -> None:
    key = tally.key(SITE)
    page = tally.raw["path"].value_counts().index[0]
    filters = [["is", "event:page", [page]]]  # answered from raw events, so both answers have rows
    body = query({"metrics": ["visits", "bounce_rate"], "dimensions": ["visit:source"], "filters": filters})

    async def scenario(client: ClientSession) -> CallToolResult:
        return await client.call_tool("query", body)

    result = with_session(tally, key, scenario)
    http = TestClient(create_app(tally.settings)).post(
        "/api/v2/query", json=body, headers={"Authorization": f"Bearer {key}"}
    )
    assert http.status_code == 200, http.text
    assert not result.is_error, text(result)
    assert result.structured_content == http.json() and http.json()["results"]


def test_refusals_come_back_as_tool_errors_with_the_http_apis_messages(tally: Tally) -> None:
    async def scenario(client: ClientSession) -> list[CallToolResult]:
        bodies = [
            query({"metrics": ["visitors"], "site_id": OTHER}),
            query({"metrics": ["total_revenue"]}),
            query({"metrics": ["visitors"], "filters": [["is", "event:page"]]}),
            {"site_id": SITE, "metrics": ["visitors"], "date_range": "7d", "colour": "red"},
        ]
        return [await client.call_tool("query", body) for body in bodies]

    scope, metric, filters, unknown = with_session(tally, tally.key(SITE), scenario)
    assert all(r.is_error for r in (scope, metric, filters, unknown))
    assert text(scope) == f"this API key may not read site {OTHER!r}"
    assert text(metric) == "metric 'total_revenue' is not supported"
    assert metric.structured_content == {"error": text(metric), "part": "metrics"}
    assert filters.structured_content["part"] == "filters[0]"
    assert unknown.structured_content["part"] == "colour" and "known keys" in text(unknown)


def test_a_key_revoked_during_a_session_is_refused_at_the_next_call(tally: Tally) -> None:
    key = tally.key(SITE)
    key_id = key.split("_")[1]

    async def scenario(client: ClientSession) -> tuple[CallToolResult, CallToolResult]:
        before = await client.call_tool("list_sites", {})
        revoke_key(tally.settings, key_id, now=dt.datetime.now(dt.UTC))
        return before, await client.call_tool("query", query({"metrics": ["pageviews"]}))

    before, after = with_session(tally, key, scenario)
    assert not before.is_error and after.is_error
    assert "TALLY_API_KEY is no longer valid" in text(after)


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (None, "TALLY_API_KEY is not set"),
        ("tly_000000000000_" + "x" * 43, "unknown, malformed or revoked"),
        ("revoked", "unknown, malformed or revoked"),
    ],
)
def test_without_a_live_key_the_server_refuses_to_start_and_says_what_to_do(
    tally: Tally, key: str | None, message: str
) -> None:
    env = {**tally.env, "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if key == "revoked":
        key = tally.key(SITE)
        revoke_key(tally.settings, key.split("_")[1], now=dt.datetime.now(dt.UTC))
    if key is not None:
        env["TALLY_API_KEY"] = key
    done = subprocess.run(
        [sys.executable, "-m", "tally", "mcp"],
        env=env,
        cwd=PROJECT_ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and message in done.stderr and "tally apikey create" in done.stderr, done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr


def test_tally_mcp_has_help_that_names_the_key_variable(tally: Tally) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tally", "mcp", "--help"], capture_output=True, text=True, env=tally.env
    )
    assert done.returncode == 0 and "usage: tally mcp" in done.stdout and "TALLY_API_KEY" in done.stdout
