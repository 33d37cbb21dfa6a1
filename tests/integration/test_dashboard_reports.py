"""The dashboard's figures against raw events read independently (delta-rs + pandas).

Raw events go into raw.pageviews, a real Spark backfill computes every view (the session's shared
``march`` warehouse), and the dashboard's report functions must agree with figures computed here
from raw: exact counts equal, HLL estimates within their bounds, t-digest percentiles within their
rank error, the drill-down (DuckDB) equal to pandas.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from deltalake import DeltaTable

from query.aggregates import AggregateReport, Aggregates, Range, dimension_values, realtime_visitors
from query.goals import Step
from query.raw import RawQuery
from tally.settings import Settings
from tests.integration.views_support import MARCH_FIRST, MARCH_LAST, MARCH_SITE

SITE = MARCH_SITE
DAYS = Range(MARCH_FIRST, MARCH_LAST)
GAP_MS = 30 * 60 * 1000


@pytest.fixture(scope="module")
def warehouse(march: Settings) -> dict[str, Any]:
    iso = march  # the session's shared backfilled tables, read only
    raw = DeltaTable(iso.table_uri("raw.pageviews")).to_pandas()
    raw = raw[(raw["site_id"] == SITE) & ~raw["is_bot"]]
    dataset = DeltaTable(iso.table_uri("raw.pageviews")).to_pyarrow_dataset()
    return {
        "settings": iso,
        "raw": raw,
        "report": AggregateReport(Aggregates(iso), SITE, DAYS),
        "drill": RawQuery(dataset, SITE, DAYS, {}, GAP_MS),
        "dataset": dataset,
    }


def exact_rank_error(values: pd.Series, estimate: float, q: float) -> float:
    """|rank of the estimate − q| as a fraction of the values (how wrong a percentile is)."""
    ranks = (values < estimate).mean(), (values <= estimate).mean()
    return 0.0 if ranks[0] <= q <= ranks[1] else min(abs(ranks[0] - q), abs(ranks[1] - q))


def test_kpis_from_the_aggregates_match_the_raw_events(warehouse: dict[str, Any]) -> None:
    raw: pd.DataFrame = warehouse["raw"]
    totals = warehouse["report"].totals()
    assert totals.pageviews == (raw["type"] == "pageview").sum() > 0
    assert totals.events == (raw["type"] == "event").sum() > 0
    # Synthetic visitor ids do not rotate daily, so the truth is simply the distinct ids.
    assert totals.visitors.lower <= raw["visitor_id"].nunique() <= totals.visitors.upper
    engagement = raw.loc[raw["type"] == "engagement", "engagement_ms"].dropna()
    assert totals.engagement_ms is not None
    for q, estimate in zip((0.5, 0.9, 0.99), totals.engagement_ms, strict=True):
        assert exact_rank_error(engagement, estimate, q) <= 0.005, f"p{q * 100:.0f}"


def test_visits_from_spark_sessions_equal_the_drill_down_sessionisation(warehouse: dict[str, Any]) -> None:
    spark_side, duck_side = warehouse["report"].totals(), warehouse["drill"].totals()
    assert spark_side.visits == duck_side.visits > 0
    assert (spark_side.bounces, spark_side.duration_ms, spark_side.visit_pageviews) == (
        duck_side.bounces,
        duck_side.duration_ms,
        duck_side.visit_pageviews,
    )
    entry = warehouse["report"].top_visits("entry_page")
    assert (
        entry.set_index("value")["visits"].to_dict()
        == warehouse["drill"].top_visits("entry_page").set_index("value")["visits"].to_dict()
    )


def test_top_pages_count_exactly_and_their_visitor_estimates_bound_the_truth(warehouse: dict[str, Any]) -> None:
    raw: pd.DataFrame = warehouse["raw"]
    views = raw[raw["type"] == "pageview"]
    top = warehouse["report"].top("page").set_index("value")
    expected = views.groupby("path").size()
    assert top["pageviews"].to_dict() == expected.sort_values(ascending=False).head(len(top)).to_dict()
    for page, row in top.iterrows():
        truth = raw.loc[raw["path"] == page, "visitor_id"].nunique()  # any event on the page, as the view counts
        bound = row["visitors_bound"] * row["visitors"]
        assert abs(row["visitors"] - truth) <= bound + 1, f"{page}: ≈{row['visitors']} vs {truth}"


def test_the_hourly_series_adds_up_to_the_totals_and_has_every_hour(warehouse: dict[str, Any]) -> None:
    series = warehouse["report"].series("hour")
    assert len(series) == DAYS.days * 24
    assert series["pageviews"].sum() == warehouse["report"].totals().pageviews
    assert series["visits"].sum() == warehouse["report"].totals().visits


def test_a_filter_narrows_every_figure_exactly(warehouse: dict[str, Any]) -> None:
    raw: pd.DataFrame = warehouse["raw"]
    drill = dataclasses.replace(warehouse["drill"], filters={"country": "DE"})
    de = raw[raw["country"] == "DE"]
    totals = drill.totals()
    assert totals.pageviews == (de["type"] == "pageview").sum() > 0
    assert totals.visitors.value == de["visitor_id"].nunique()
    pages = drill.top("page").set_index("value")["pageviews"].to_dict()
    assert pages == de[de["type"] == "pageview"].groupby("path").size().sort_values(ascending=False).head(10).to_dict()


def test_a_funnel_counts_visitors_who_did_each_step_after_the_previous_one(warehouse: dict[str, Any]) -> None:
    raw: pd.DataFrame = warehouse["raw"]
    steps = (Step("page", "/"), Step("page", "/pricing"), Step("event", "signup"))
    expected = []
    reached = {v: -1 for v in raw["visitor_id"].unique()}
    for step in steps:
        column, kind = ("path", "pageview") if step.kind == "page" else ("name", "event")
        hits = raw[(raw["type"] == kind) & (raw[column] == step.value)].sort_values("event_time")
        after: dict[str, int] = {}
        for visitor, at in zip(hits["visitor_id"], hits["event_time"], strict=True):
            if (
                visitor in reached
                and visitor not in after
                and (at > reached[visitor] or (at >= 0 and step == steps[0]))
            ):
                after[visitor] = at
        reached = after
        expected.append(len(reached))
    funnel = warehouse["drill"].funnel(steps)
    assert funnel["visitors"].tolist() == expected
    assert expected[0] > expected[1] > 0


def test_the_filter_pickers_offer_the_most_viewed_values_first(warehouse: dict[str, Any]) -> None:
    raw: pd.DataFrame = warehouse["raw"]
    countries = dimension_values(warehouse["report"].agg, SITE, DAYS, "country")
    by_views = raw[raw["type"] == "pageview"].groupby(raw["country"].fillna("(none)")).size()
    assert countries[0] == by_views.idxmax()
    assert set(countries) == set(by_views.index) | (set(countries) - set(by_views.index))


def test_goal_conversions_come_from_the_goal_page_sketches(warehouse: dict[str, Any]) -> None:
    raw: pd.DataFrame = warehouse["raw"]
    estimate = warehouse["report"].goal(Step("page", "/pricing"))
    truth = raw.loc[raw["path"] == "/pricing", "visitor_id"].nunique()
    assert estimate.lower - 1 <= truth <= estimate.upper + 1
    exact = warehouse["drill"].goal(Step("page", "/pricing"))
    assert exact.value == raw.loc[(raw["path"] == "/pricing") & (raw["type"] == "pageview"), "visitor_id"].nunique()


def test_an_empty_warehouse_reads_as_zeros_not_errors(tmp_path: Path, settings: Settings) -> None:
    iso = dataclasses.replace(settings, warehouse=dataclasses.replace(settings.warehouse, path=str(tmp_path)))
    totals = AggregateReport(Aggregates(iso), SITE, DAYS).totals()
    assert (totals.pageviews, totals.visits, totals.visitors.value) == (0, 0, 0)


def test_realtime_visitors_are_the_hopping_window_ending_at_the_current_minute(warehouse: dict[str, Any]) -> None:
    raw: pd.DataFrame = warehouse["raw"]
    busiest_minute = (raw["event_time"] // 60_000).value_counts().idxmax()  # a window that has visitors
    window_start = int(busiest_minute) * 60_000
    now = dt.datetime.fromtimestamp(window_start / 1000 + 4 * 60 + 40, dt.UTC)
    inside = raw[(raw["event_time"] >= window_start) & (raw["event_time"] < window_start + 5 * 60_000)]
    estimate = realtime_visitors(warehouse["report"].agg, SITE, now)
    assert estimate is not None and inside["visitor_id"].nunique() > 0
    assert estimate.lower <= inside["visitor_id"].nunique() <= estimate.upper
    assert realtime_visitors(warehouse["report"].agg, SITE, dt.datetime(2026, 5, 1, tzinfo=dt.UTC)) is None
