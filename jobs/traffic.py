"""Traffic views: tumbling 1 min / 1 h / 1 day windows by site × dimension, and the hopping
5-minute "active visitors" window.

The 1-minute grain is computed from events; coarser grains are rolled up from the finer one by
merging sketches (HLL union, t-digest merge) and adding exact counts, so every grain agrees
with the others by construction. The hopping window is built from 1-minute tumbling windows,
as DDIA suggests.
"""

from __future__ import annotations

import datetime as dt
import functools

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType

from jobs.sketch_columns import digest_of_values, merged_digest, merged_visitors_sketch, visitors_sketch
from jobs.views import (
    GRAIN_INTERVAL,
    dimension_value,
    event_date,
    is_custom_event,
    is_engagement,
    is_pageview,
    reportable,
)
from tally.dimensions import ALL, EVENT, TRAFFIC_DIMENSIONS, Grain
from tally.spans import spark_interval

# The hopping "active visitors" window: its length and its step.
ACTIVE_WINDOW = dt.timedelta(minutes=5)
ACTIVE_STEP = dt.timedelta(minutes=1)


def _dimension_rows(dimensions: dict[str, str]) -> list[tuple[str, Column, Column | None]]:
    """(dimension, value, the events it applies to) for each row an event gives: the site total,
    each dimension, and custom events by name (None: every event)."""
    rows: list[tuple[str, Column, Column | None]] = [(ALL, F.lit(""), None)]
    rows += [(name, dimension_value(col), None) for name, col in dimensions.items()]
    rows.append((EVENT, dimension_value("name"), is_custom_event()))
    return rows


def by_dimension(events: DataFrame, dimensions: dict[str, str]) -> DataFrame:
    """One row per (event, dimension): the site total, each dimension, and custom event names."""
    pairs = []
    for name, value, applies in _dimension_rows(dimensions):
        pair = F.struct(F.lit(name).alias("dimension"), value.alias("value"))
        pairs.append(pair if applies is None else F.when(applies, pair))
    exploded = events.withColumn("dim", F.explode(F.array_compact(F.array(*pairs))))
    return exploded.withColumn("dimension", F.col("dim.dimension")).withColumn("value", F.col("dim.value")).drop("dim")


def _site_total() -> Column:
    return F.col("dimension") == ALL


def _counts_and_visitors() -> list[Column]:
    return [
        F.count_if(is_pageview()).alias("pageviews"),
        F.count_if(is_custom_event()).alias("events"),
        visitors_sketch(F.col("visitor_id")).alias("visitors_sketch"),
    ]


def _value_lists(site_total: Column) -> list[Column]:
    """The engagement and load values of the ``site_total`` rows (empty lists on other rows)."""
    return [
        F.collect_list(F.when(site_total & is_engagement(), F.col("engagement_ms"))).alias("engagement_values"),
        F.collect_list(F.when(site_total & is_pageview(), F.col("load_ms"))).alias("load_values"),
    ]


# A minute row's columns after its site and window edges.
_MINUTE_VALUES = ("dimension", "value", "pageviews", "events", "visitors_sketch", "engagement_values", "load_values")


# The column ``by_minute`` adds: an event's 1-minute tumbling window (a struct of start and end).
MINUTE = "minute_window"


def _minute() -> Column:
    return F.window("event_ts", "1 minute")


def _site_and_window(window: str) -> list[Column]:
    """A minute row's first columns: its site, then the edges of its ``window`` (a struct of start and end)."""
    edges = [F.col(f"{window}.start").alias("window_start"), F.col(f"{window}.end").alias("window_end")]
    return [F.col("site_id"), *edges]


def traffic_minutes(events: DataFrame) -> DataFrame:
    """1-minute tumbling windows per site × dimension, with raw value lists for the digests.

    The lists are what the streaming state keeps between micro-batches (update mode emits
    the whole window each time); ``with_digests`` turns them into t-digests before writing.
    Only the site total's rows get values: engagement and load percentiles are reported for the
    site as a whole (``query.aggregates.totals_of``), so other dimensions' digests stay null.
    """
    return (
        by_dimension(reportable(events), TRAFFIC_DIMENSIONS)
        .groupBy(F.col("site_id"), _minute().alias("w"), F.col("dimension"), F.col("value"))
        .agg(*_counts_and_visitors(), *_value_lists(_site_total()))
        .select(*_site_and_window("w"), *_MINUTE_VALUES)
    )


def by_minute(events: DataFrame, partitions: int) -> DataFrame:
    """``events`` with their minute (``MINUTE``), spread over ``partitions`` by site and minute, as
    ``traffic_minutes_batch`` wants them."""
    return events.withColumn(MINUTE, _minute()).repartition(partitions, F.col("site_id"), F.col(MINUTE))


def traffic_minutes_batch(events: DataFrame) -> DataFrame:
    """``traffic_minutes`` for a batch job: the same rows, computed per dimension.

    Each dimension is aggregated on its own and the results are put together, instead of making
    11 rows of every event first (``by_dimension``). Given events from ``by_minute``, whose
    partitions hold whole minutes, no aggregate shuffles (figures in ``docs/OPERATIONS.md``, "Where
    its time goes").
    A streaming job cannot union aggregations, so the stream keeps ``traffic_minutes``; the
    stream = backfill test holds the two equal.
    """
    if MINUTE not in events.columns:
        events = events.withColumn(MINUTE, _minute())
    events = reportable(events)
    partitions = events.rdd.getNumPartitions()
    no_values = [
        F.array().cast(ArrayType(events.schema[column].dataType)).alias(f"{kind}_values")
        for kind, column in (("engagement", "engagement_ms"), ("load", "load_ms"))
    ]
    parts = []
    for name, value, applies in _dimension_rows(TRAFFIC_DIMENSIONS):
        rows = events if applies is None else events.where(applies)
        grouped = rows.groupBy(F.col("site_id"), F.col(MINUTE), value.alias("value"))
        if name == ALL:
            minutes = grouped.agg(*_counts_and_visitors(), *_value_lists(F.lit(True)))
        else:
            minutes = grouped.agg(*_counts_and_visitors()).select("*", *no_values)
        parts.append(minutes.withColumn("dimension", F.lit(name)).select(*_site_and_window(MINUTE), *_MINUTE_VALUES))
    # Each aggregate keeps the events' partitions: one task a partition would write 12 files a date.
    return functools.reduce(DataFrame.unionByName, parts).coalesce(max(1, partitions))


def with_digests(minutes: DataFrame) -> DataFrame:
    """Finish ``traffic_minutes`` rows: value lists become t-digests; add the date partition."""
    return minutes.select(
        "site_id",
        "window_start",
        "window_end",
        "dimension",
        "value",
        "pageviews",
        "events",
        "visitors_sketch",
        digest_of_values(F.col("engagement_values")).alias("engagement_ms_digest"),
        digest_of_values(F.col("load_values")).alias("load_ms_digest"),
        event_date("window_start"),
    )


def roll_up(finer: DataFrame, grain: Grain) -> DataFrame:
    """Roll traffic rows up to hours or days: exact counts add; sketches and digests merge.

    Digests merge for the site total only (rows written before other dimensions' digests were
    dropped still carry them; they are left out, so every grain holds them for ``all`` alone).
    """
    start = F.date_trunc(grain, F.col("window_start"))
    return (
        finer.groupBy(F.col("site_id"), start.alias("window_start"), F.col("dimension"), F.col("value"))
        .agg(
            F.sum("pageviews").alias("pageviews"),
            F.sum("events").alias("events"),
            merged_visitors_sketch(F.col("visitors_sketch")).alias("visitors_sketch"),
            F.collect_list(F.when(_site_total(), F.col("engagement_ms_digest"))).alias("engagement_digests"),
            F.collect_list(F.when(_site_total(), F.col("load_ms_digest"))).alias("load_digests"),
        )
        .select(
            "site_id",
            "window_start",
            (F.col("window_start") + F.expr(GRAIN_INTERVAL[grain])).alias("window_end"),
            "dimension",
            "value",
            "pageviews",
            "events",
            "visitors_sketch",
            merged_digest(F.col("engagement_digests")).alias("engagement_ms_digest"),
            merged_digest(F.col("load_digests")).alias("load_ms_digest"),
            event_date("window_start"),
        )
    )


def active_visitors(minutes: DataFrame) -> DataFrame:
    """Hopping windows of 5 minutes every minute, from the site-total 1-minute rows."""
    window = F.window("window_start", spark_interval(ACTIVE_WINDOW), spark_interval(ACTIVE_STEP))
    return (
        minutes.where(F.col("dimension") == ALL)
        .groupBy(F.col("site_id"), window.alias("w"))
        .agg(
            merged_visitors_sketch(F.col("visitors_sketch")).alias("visitors_sketch"),
            F.sum("pageviews").alias("pageviews"),
        )
        .select(
            "site_id",
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "visitors_sketch",
            "pageviews",
            event_date("w.start"),
        )
    )
