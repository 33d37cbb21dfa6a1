"""Core Web Vitals and scroll depth in the query layer: band shares, p75 from merged hour digests
against the exact answer from the same events, and which Stats API queries are answered or refused."""

from __future__ import annotations

import datetime as dt
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from starlette.testclient import TestClient

from api.app import create_app
from api.keys import create_key
from query.aggregates import Range
from query.engine import fits_aggregates, run
from query.plausible import parse_query
from query.report import VitalsReport
from query.spec import VITALS_METRICS, Filter, QueryError
from query.vitals import BandCounts, ExactVitals, VitalFigures, figures_from_rows
from tally.settings import load_settings
from tally.sketches import digest_from_values
from tally.table_schemas import IMPORTED_DAILY_SCHEMA, IMPORTED_RANGES_SCHEMA
from tally.vitals import BANDS, VITALS, VITALS_BY_NAME

SITE = "shop.example"
DAY = dt.date(2026, 11, 24)
PAGES = ["/", "/pricing", "/blog/a"]
DEVICES = ["desktop", "mobile"]
Q = 0.75
RANK_ERROR = 0.005


def make_events(seed: int = 3, pageviews: int = 400) -> list[dict[str, Any]]:
    """Vitals and engagement beacons of one day, with values on and around Google's band edges."""
    rng = random.Random(seed)
    events: list[dict[str, Any]] = []
    for i in range(pageviews):
        at = int(dt.datetime.combine(DAY, dt.time(rng.randrange(24), rng.randrange(60)), dt.UTC).timestamp() * 1000)
        base = {
            "site_id": SITE,
            "event_date": DAY,
            "event_time": at,
            "visitor_id": f"v{i % 50}",
            "path": rng.choice(PAGES),
            "hostname": SITE,
            "device": rng.choice(DEVICES),
            "country": rng.choice(["DE", "FR"]),
            "is_bot": i % 97 == 0,  # bots are measured by no report
        }
        vitals: dict[str, Any] = {"type": "vitals", "scroll_depth": rng.choice([None, rng.randrange(0, 101)])}
        for v in VITALS:
            if v.name == "inp" and rng.random() < 0.3:
                continue  # no interaction: no INP
            edge = rng.choice([v.good_max, v.poor_above])
            value = edge if rng.random() < 0.1 else rng.uniform(0, v.poor_above * 1.6)
            vitals[v.column] = round(value, 3) if v.name == "cls" else round(value)
        events.append({**base, **vitals})
        if rng.random() < 0.5:
            events.append({**base, "type": "engagement", "scroll_depth": rng.randrange(0, 101)})
    return events


EVENTS = make_events()
LIVE = [e for e in EVENTS if not e["is_bot"]]
SCHEMA = pa.schema(
    {
        "site_id": pa.string(),
        "event_date": pa.date32(),
        "event_time": pa.int64(),
        "visitor_id": pa.string(),
        "type": pa.string(),
        "path": pa.string(),
        "hostname": pa.string(),
        "device": pa.string(),
        "country": pa.string(),
        "is_bot": pa.bool_(),
        "scroll_depth": pa.int32(),
        **{v.column: pa.float64() if v.name == "cls" else pa.int64() for v in VITALS},
    }
)


def raw_dataset(events: list[dict[str, Any]]) -> ds.Dataset:
    return ds.dataset(pa.table({n: [e.get(n) for e in events] for n in SCHEMA.names}, schema=SCHEMA))


def hour_rows(events: list[dict[str, Any]]) -> pd.DataFrame:
    """agg.vitals_1h's rows of the events, built here in plain Python (one per hour, dimension and value)."""
    groups: dict[tuple[int, str, str], list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        if e["is_bot"]:
            continue
        hour = e["event_time"] // 3_600_000
        for dimension, value in (("all", ""), ("page", e["path"]), ("device", e["device"])):
            groups[(hour, dimension, value)].append(e)
    rows = []
    for (_hour, dimension, value), group in groups.items():
        vitals = [e for e in group if e["type"] == "vitals"]
        depths = [e["scroll_depth"] for e in group if e.get("scroll_depth") is not None]
        row: dict[str, Any] = {
            "dimension": dimension,
            "value": value,
            "measured": len(vitals),
            "scroll_depth_sum": sum(depths),
            "scroll_depth_count": len(depths),
        }
        for v in VITALS:
            values = [e[v.column] for e in vitals if e.get(v.column) is not None]
            row[v.digest_column] = digest_from_values(values) if values else None
            for band in BANDS:
                row[v.band_column(band)] = sum(1 for x in values if v.band(x) == band)
        rows.append(row)
    return pd.DataFrame(rows)


def truths(pick: str) -> dict[str, dict[str, Any]]:
    """Per value of ``pick`` (``all``, ``path`` or ``device``): the measured values and scroll depths."""
    out: dict[str, dict[str, Any]] = defaultdict(lambda: {"values": defaultdict(list), "depths": []})
    for e in LIVE:
        key = "" if pick == "all" else e[pick]
        if e.get("scroll_depth") is not None:
            out[key]["depths"].append(e["scroll_depth"])
        if e["type"] == "vitals":
            for v in VITALS:
                if e.get(v.column) is not None:
                    out[key]["values"][v.name].append(e[v.column])
    return out


def within_rank_bound(estimate: float, values: list[float]) -> bool:
    """Whether ``estimate`` lies between the values ranked ``(q ± error) · n``, one value's rank of slack."""
    ordered = sorted(values)
    n = len(ordered)
    low = ordered[max(0, int(np.floor((Q - RANK_ERROR) * n)) - 1)]
    high = ordered[min(n - 1, int(np.ceil((Q + RANK_ERROR) * n)))]
    return low <= estimate <= high


def test_band_shares_are_percents_of_the_page_views_that_measured_the_vital() -> None:
    counts = BandCounts(good=6, needs_improvement=3, poor=1)
    assert [counts.share(b) for b in BANDS] == [60.0, 30.0, 10.0]
    assert BandCounts(good=1, needs_improvement=1, poor=1).share("good") == 33.3
    assert BandCounts().share("poor") is None, "nothing measured is no share, not 0%"


def test_a_value_on_a_threshold_is_in_the_better_band_as_google_defines_it() -> None:
    lcp, cls = VITALS_BY_NAME["lcp"], VITALS_BY_NAME["cls"]
    assert [lcp.band(2500), lcp.band(2501), lcp.band(4000), lcp.band(4001)] == [
        "good",
        "needs_improvement",
        "needs_improvement",
        "poor",
    ]
    assert [cls.band(0.1), cls.band(0.25), cls.band(0.2501)] == ["good", "needs_improvement", "poor"]


@pytest.mark.parametrize(("dimension", "pick"), [("all", "all"), ("page", "path"), ("device", "device")])
def test_raw_events_give_exact_band_counts_p75_and_scroll_depth(dimension: str, pick: str) -> None:
    figures = {f.value: f for f in ExactVitals(raw_dataset(EVENTS), SITE, Range(DAY, DAY)).vitals(dimension)}
    expected = truths(pick)
    assert set(figures) == set(expected)
    for value, truth in expected.items():
        f = figures[value]
        for v in VITALS:
            values = truth["values"][v.name]
            assert f.bands[v.name] == BandCounts(*(sum(1 for x in values if v.band(x) == b) for b in BANDS))
            assert f.p75[v.name] == pytest.approx(float(np.quantile(values, Q)))
        assert f.metric("scroll_depth") == round(sum(truth["depths"]) / len(truth["depths"]))


@pytest.mark.parametrize(("dimension", "pick"), [("all", "all"), ("page", "path"), ("device", "device")])
def test_merged_hour_digests_give_the_p75_within_the_rank_bound_and_the_exact_counts(dimension: str, pick: str) -> None:
    rows = hour_rows(EVENTS)
    folded = {f.value: f for f in figures_from_rows(rows[rows["dimension"] == dimension])}
    exact = {f.value: f for f in ExactVitals(raw_dataset(EVENTS), SITE, Range(DAY, DAY)).vitals(dimension)}
    assert set(folded) == set(exact)
    for value, truth in truths(pick).items():
        for v in VITALS:
            p75 = folded[value].p75[v.name]
            assert p75 is not None and within_rank_bound(p75, truth["values"][v.name]), (value, v.name)
        shown = [m for m in VITALS_METRICS if not m.endswith("_p75")]
        assert {m: folded[value].metric(m) for m in shown} == {m: exact[value].metric(m) for m in shown}


def test_a_filter_narrows_the_exact_vitals_to_the_matching_page_views() -> None:
    narrowed = ExactVitals(
        raw_dataset(EVENTS), SITE, Range(DAY, DAY), (Filter("is", dimension="visit:country", values=("DE",)),)
    ).vitals("all")
    german = [e for e in LIVE if e["type"] == "vitals" and e["country"] == "DE"]
    assert narrowed[0].measured == len(german)
    assert narrowed[0].bands["lcp"].measured == sum(1 for e in german if e.get("lcp_ms") is not None)
    # The scroll depths too: of the German beacons alone, vitals and engagement ones alike.
    depths = [e["scroll_depth"] for e in LIVE if e["country"] == "DE" and e.get("scroll_depth") is not None]
    assert (narrowed[0].scroll_sum, narrowed[0].scroll_count) == (sum(depths), len(depths))


def test_a_page_with_scroll_depths_but_no_vitals_beacon_is_a_row_and_one_with_neither_is_none() -> None:
    at = int(dt.datetime.combine(DAY, dt.time(12), dt.UTC).timestamp() * 1000)
    base = {
        "site_id": SITE,
        "event_date": DAY,
        "event_time": at,
        "visitor_id": "v",
        "is_bot": False,
        "device": "mobile",
    }
    events = [
        *EVENTS,
        {**base, "type": "engagement", "path": "/scrolled-only", "scroll_depth": 40},
        {**base, "type": "engagement", "path": "/scrolled-only", "scroll_depth": 90},
        {**base, "type": "engagement", "path": "/read-only"},  # an engagement beacon without a scroll depth
    ]
    by_page = {f.value: f for f in ExactVitals(raw_dataset(events), SITE, Range(DAY, DAY)).vitals("page")}
    assert "/read-only" not in by_page
    scrolled = by_page["/scrolled-only"]
    assert (scrolled.measured, scrolled.scroll_sum, scrolled.scroll_count) == (0, 130, 2)
    assert all(b.measured == 0 for b in scrolled.bands.values()) and set(scrolled.p75.values()) == {None}
    assert set(by_page) == {"/scrolled-only", *PAGES}  # every other page as before


def test_the_api_shows_p75_in_milliseconds_cls_to_three_decimals_and_scroll_depth_as_a_whole_percent() -> None:
    figures = VitalFigures(
        "/",
        3,
        {"lcp": 2512.6, "cls": 0.12345, "inp": None},
        {"lcp": BandCounts(2, 1, 0)},
        scroll_sum=100,
        scroll_count=3,
    )
    assert figures.metric("lcp_p75") == 2513 and figures.metric("cls_p75") == 0.123
    assert figures.metric("inp_p75") is None and figures.metric("lcp_good") == 66.7
    assert figures.metric("scroll_depth") == 33


class VitalsOnly:
    """Sources of vitals only; ``aggregate`` answers agg.vitals_1h's questions, raw events the rest."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.events = events
        self.asked: list[str] = []

    def aggregate_vitals(self, site_id: str, start: dt.date, end: dt.date) -> VitalsReport:
        self.asked.append("aggregates")
        return _RowsReport(hour_rows(self.events) if site_id == SITE else pd.DataFrame())

    def exact_vitals(
        self,
        site_id: str,
        start: dt.date,
        end: dt.date,
        *,
        filters: tuple[Filter, ...] = (),
        between: tuple[dt.datetime, dt.datetime] | None = None,
    ) -> VitalsReport | None:
        self.asked.append("raw")
        return ExactVitals(raw_dataset(self.events), site_id, Range(start, end), filters, between)

    def aggregate_report(self, site_id: str, start: dt.date, end: dt.date) -> Any:
        raise AssertionError("a vitals query reads no traffic report")

    def exact(self, site_id: str) -> Any:
        raise AssertionError("a vitals query reads no traffic report")

    def visitors_meaning(self, site_id: str, start: dt.date, end: dt.date) -> str:
        return "daily visitor ids"

    def open_visits(self, site_id: str, start: dt.date, end: dt.date) -> int:
        return 0  # the events are all in the past: no visit is still open

    def imported(self, site_id: str, start: dt.date, end: dt.date, table: str) -> pa.Table:
        return IMPORTED_DAILY_SCHEMA.empty_table()  # nothing imported

    def imported_ranges(self, site_id: str, start: dt.date, end: dt.date) -> pa.Table:
        return IMPORTED_RANGES_SCHEMA.empty_table()  # nothing imported


class _RowsReport:
    exact = False

    def __init__(self, rows: pd.DataFrame) -> None:
        self.rows = rows

    def vitals(self, dimension: str) -> list[VitalFigures]:
        return figures_from_rows(self.rows[self.rows["dimension"] == dimension]) if not self.rows.empty else []


def ask(body: dict[str, Any], sources: VitalsOnly | None = None) -> Any:
    query = parse_query({"site_id": SITE, "date_range": [DAY.isoformat(), DAY.isoformat()], **body}, today=DAY)
    return run(query, sources or VitalsOnly(EVENTS))


def test_the_browser_tests_question_gives_each_page_its_measured_lcp_and_cls() -> None:
    sources = VitalsOnly(EVENTS)
    answer = ask({"metrics": ["lcp_p75", "cls_p75"], "dimensions": ["event:page"]}, sources)
    assert sources.asked == ["aggregates"] and answer.meta["source"] == "aggregates"
    rows = {r["dimensions"][0]: r["metrics"] for r in answer.results}
    assert set(rows) == set(PAGES)
    for page, truth in truths("path").items():
        lcp, cls = rows[page]
        assert within_rank_bound(lcp, truth["values"]["lcp"]) or abs(lcp - np.quantile(truth["values"]["lcp"], Q)) < 1
        assert (
            within_rank_bound(cls, truth["values"]["cls"]) or abs(cls - np.quantile(truth["values"]["cls"], Q)) < 1e-3
        )
    lcp_meta = answer.meta["metrics"]["lcp_p75"]
    assert (
        lcp_meta["exact"] is False and lcp_meta["rank_error_bound"] == RANK_ERROR and "t-digest" in lcp_meta["method"]
    )


def test_band_shares_and_scroll_depth_are_exact_from_the_view_and_from_raw_events_alike() -> None:
    metrics = ["lcp_good", "lcp_needs_improvement", "lcp_poor", "inp_poor", "scroll_depth"]
    from_view = ask({"metrics": metrics, "dimensions": ["visit:device"]})
    sources = VitalsOnly(EVENTS)
    from_raw = ask({"metrics": metrics, "dimensions": ["visit:device"], "date_range": "24h"}, sources)
    assert sources.asked == ["raw"] and from_raw.meta["source"] == "raw"
    assert sorted(r["dimensions"] + r["metrics"] for r in from_view.results) == sorted(
        r["dimensions"] + r["metrics"] for r in from_raw.results
    )
    assert all(from_view.meta["metrics"][m]["exact"] for m in metrics)
    for row in from_view.results:
        assert sum(row["metrics"][:3]) == pytest.approx(100, abs=0.2)


def test_a_site_without_measurements_answers_one_row_of_nulls_not_an_error() -> None:
    answer = ask({"site_id": "empty.example", "metrics": ["lcp_p75", "lcp_good", "scroll_depth"]})
    assert answer.results == [{"dimensions": [], "metrics": [None, None, None]}]


def test_a_filtered_vitals_query_is_answered_exactly_from_raw_events() -> None:
    query = parse_query(
        {
            "site_id": SITE,
            "date_range": [DAY.isoformat(), DAY.isoformat()],
            "metrics": ["ttfb_p75"],
            "filters": [["is", "event:page", ["/pricing"]]],
        },
        today=DAY,
    )
    assert not fits_aggregates(query)
    answer = run(query, VitalsOnly(EVENTS))
    values = truths("path")["/pricing"]["values"]["ttfb"]
    assert answer.results[0]["metrics"] == [round(float(np.quantile(values, Q)))]
    assert answer.meta["metrics"]["ttfb_p75"]["exact"] is True


@pytest.mark.parametrize(
    ("body", "part", "words"),
    [
        ({"metrics": ["lcp_p75", "visitors"]}, "metrics", "cannot be combined with 'visitors'"),
        ({"metrics": ["cls_p75"], "dimensions": ["visit:source"]}, "dimensions", "'event:page', 'visit:device'"),
        ({"metrics": ["scroll_depth"], "dimensions": ["time:day"]}, "dimensions", "not 'time:day'"),
        (
            {"metrics": ["lcp_good"], "dimensions": ["event:page", "visit:device"]},
            "dimensions",
            "not two dimensions",
        ),
        (
            {"metrics": ["inp_p75"], "filters": [["is", "event:name", ["signup"]]]},
            "filters",
            "cannot be filtered by 'event:name'",
        ),
        (
            {"metrics": ["inp_p75"], "filters": [["not", ["is", "visit:entry_page", ["/"]]]]},
            "filters",
            "not entry or exit pages",
        ),
        ({"metrics": ["lcp_p90"]}, "metrics", "metric 'lcp_p90' is not supported"),
    ],
)
def test_vitals_metrics_outside_what_they_support_are_a_400_that_says_what_is(
    body: dict[str, Any], part: str, words: str
) -> None:
    with pytest.raises(QueryError) as refused:
        parse_query({"site_id": SITE, "date_range": "7d", **body}, today=DAY)
    assert refused.value.part == part and words in str(refused.value)


def test_every_vital_has_a_p75_and_three_band_metrics_named_once() -> None:
    assert len(VITALS_METRICS) == len(set(VITALS_METRICS)) == 4 * len(VITALS) + 1
    for v in VITALS:
        assert {f"{v.name}_p75", f"{v.name}_good", f"{v.name}_needs_improvement", f"{v.name}_poor"} <= set(
            VITALS_METRICS
        )


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[TestClient, dict[str, str]]:
    monkeypatch.setenv("TALLY_HOME", str(tmp_path))
    monkeypatch.setenv("TALLY_ENV", "test")
    settings = load_settings()
    key, _ = create_key(settings, name="t", sites=("demo.tally.local",), now=dt.datetime.now(dt.UTC))
    return TestClient(create_app(settings)), {"Authorization": f"Bearer {key}"}


def test_over_http_the_browser_tests_question_is_answered_before_anything_was_measured(
    api: tuple[TestClient, dict[str, str]],
) -> None:
    client, headers = api
    body = {"site_id": "demo.tally.local", "metrics": ["lcp_p75", "cls_p75"], "date_range": "day"}
    by_page = client.post("/api/v2/query", json={**body, "dimensions": ["event:page"]}, headers=headers)
    assert by_page.status_code == 200, by_page.text
    assert by_page.json()["results"] == [] and by_page.json()["meta"]["metrics"]["cls_p75"]["exact"] is False
    total = client.post("/api/v2/query", json=body, headers=headers).json()
    assert total["results"] == [{"dimensions": [], "metrics": [None, None]}]


def test_over_http_a_vitals_metric_by_an_unsupported_dimension_is_a_400_naming_the_ones_it_supports(
    api: tuple[TestClient, dict[str, str]],
) -> None:
    client, headers = api
    body = {"site_id": "demo.tally.local", "metrics": ["lcp_p75"], "date_range": "7d", "dimensions": ["visit:os"]}
    refused = client.post("/api/v2/query", json=body, headers=headers)
    assert refused.status_code == 400
    assert refused.json() == {
        "error": "metric 'lcp_p75' supports no dimension or one of 'event:page', 'visit:device', not 'visit:os'",
        "part": "dimensions",
    }
    schema = client.get("/openapi.json").json()
    metrics = schema["paths"]["/api/v2/query"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert {"lcp_p75", "inp_poor", "scroll_depth"} <= set(metrics["properties"]["metrics"]["items"]["enum"])


def test_a_filter_pattern_duckdb_cannot_compile_is_a_400_not_a_crash() -> None:
    with pytest.raises(QueryError) as refused:
        ask({"metrics": ["lcp_p75"], "filters": [["matches", "event:page", ["(unclosed"]]]})
    assert refused.value.part == "filters" and "regular expression is not valid" in str(refused.value)
