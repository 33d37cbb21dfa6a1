"""The backfill's minute rows (``traffic_minutes_batch``, one aggregate per dimension) against the
stream's (``traffic_minutes``, every event made into a row per dimension first), on the same events.

Synthetic traffic of two sites, plus events at the edges: a bot, a custom event without a name,
events with no source, country or device, and one without a visitor id. The two must give the same
rows: keys, counts, distinct-visitor estimates and value lists.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs import traffic
from jobs.views import VIEW_FIELDS, with_event_ts
from simulator.synthetic import synthetic_events
from tally.dimensions import TRAFFIC_DIMENSION_NAMES

START = dt.datetime(2026, 4, 6, 23, 50, tzinfo=dt.UTC)  # over midnight


def _edge_rows(template: dict[str, object]) -> list[dict[str, object]]:
    at = int((START + dt.timedelta(minutes=3)).timestamp() * 1000)
    changes: tuple[dict[str, object], ...] = (
        {"is_bot": True, "visitor_id": "bot"},
        {"type": "event", "name": None},
        {"type": "event", "name": "signup"},
        {"source": None, "country": None, "device": None},
        {"visitor_id": None},
        {"type": "engagement", "engagement_ms": 4_000, "load_ms": None},
        {"load_ms": 900, "site_id": "other.tally.local"},
    )
    return [{**template, "event_id": f"edge-{n}", "event_time": at + n * 20_000, **c} for n, c in enumerate(changes)]


@pytest.fixture(scope="module")
def events(spark: SparkSession) -> DataFrame:
    span = dt.timedelta(minutes=40)
    first = synthetic_events(visits=400, start=START, span=span, seed=3)
    second = synthetic_events(visits=150, start=START, span=span, site_id="other.tally.local", seed=4)
    table = pa.concat_tables([first, second])
    edges = pa.Table.from_pylist(_edge_rows(first.slice(0, 1).to_pylist()[0]), schema=table.schema)
    frame = spark.createDataFrame(pa.concat_tables([table, edges]))
    return with_event_ts(frame.select(*VIEW_FIELDS))


def _comparable(minutes: DataFrame) -> Counter[tuple[object, ...]]:
    counted = ("site_id", "window_start", "window_end", "dimension", "value", "pageviews", "events")
    rows = minutes.select(
        *counted,
        F.hll_sketch_estimate("visitors_sketch").alias("visitors"),
        F.sort_array("engagement_values").alias("engagement_values"),
        F.sort_array("load_values").alias("load_values"),
    ).collect()
    return Counter(tuple(tuple(v) if isinstance(v, list) else v for v in row) for row in rows)  # a key twice shows


@pytest.mark.parametrize("spread", [True, False], ids=["by_minute", "as_read"])
def test_the_batch_minute_rows_equal_the_streams(events: DataFrame, spread: bool) -> None:
    stream = _comparable(traffic.traffic_minutes(events))
    batch = _comparable(traffic.traffic_minutes_batch(traffic.by_minute(events, 3) if spread else events))
    assert batch == stream
    assert {row[3] for row in stream} == set(TRAFFIC_DIMENSION_NAMES)  # every dimension, custom events too
    assert any(row[0] == "other.tally.local" for row in stream)


def test_events_spread_by_minute_are_aggregated_without_another_shuffle(events: DataFrame) -> None:
    minutes = traffic.traffic_minutes_batch(traffic.by_minute(events, 3).persist())
    plan = minutes._jdf.queryExecution().executedPlan().toString()
    # The cached events' own spread is the only shuffle (REPARTITION_BY_NUM); an aggregate's would be another.
    shuffles = [line for line in plan.splitlines() if "Exchange" in line]
    assert shuffles and all("REPARTITION_BY_NUM" in line for line in shuffles), plan
    # Put back together in as many partitions as the events: one file a date per task, not 12.
    assert minutes.rdd.getNumPartitions() == 3
