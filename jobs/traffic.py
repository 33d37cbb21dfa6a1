"""Traffic views: tumbling 1 min / 1 h / 1 day windows by site × dimension, and the hopping
5-minute "active visitors" window.

The 1-minute grain is computed from events; coarser grains are rolled up from the finer one by
merging sketches (HLL union, t-digest merge) and adding exact counts, so every grain agrees
with the others by construction. The hopping window is built from 1-minute tumbling windows,
as DDIA suggests.
"""

from __future__ import annotations

import datetime as dt

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

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
from tally.dimensions import ALL, TRAFFIC_DIMENSIONS, Grain
from tally.spans import spark_interval

# The hopping "active visitors" window: its length and its step.
ACTIVE_WINDOW = dt.timedelta(minutes=5)
ACTIVE_STEP = dt.timedelta(minutes=1)


def by_dimension(events: DataFrame, dimensions: dict[str, str]) -> DataFrame:
    """One row per (event, dimension): the site total, each dimension, and custom event names."""
    pairs = [F.struct(F.lit(ALL).alias("dimension"), F.lit("").alias("value"))]
    pairs += [
        F.struct(F.lit(name).alias("dimension"), dimension_value(col).alias("value"))
        for name, col in dimensions.items()
    ]
    pairs.append(
        F.when(is_custom_event(), F.struct(F.lit("event").alias("dimension"), dimension_value("name").alias("value")))
    )
    exploded = events.withColumn("dim", F.explode(F.array_compact(F.array(*pairs))))
    return exploded.withColumn("dimension", F.col("dim.dimension")).withColumn("value", F.col("dim.value")).drop("dim")


def _site_total() -> Column:
    return F.col("dimension") == ALL


def traffic_minutes(events: DataFrame) -> DataFrame:
    """1-minute tumbling windows per site × dimension, with raw value lists for the digests.

    The lists are what the streaming state keeps between micro-batches (update mode emits
    the whole window each time); ``with_digests`` turns them into t-digests before writing.
    Only the site total's rows get values: engagement and load percentiles are reported for the
    site as a whole (``query.aggregates.totals_of``), so other dimensions' digests stay null.
    """
    window = F.window("event_ts", "1 minute")
    return (
        by_dimension(reportable(events), TRAFFIC_DIMENSIONS)
        .groupBy(F.col("site_id"), window.alias("w"), F.col("dimension"), F.col("value"))
        .agg(
            F.count_if(is_pageview()).alias("pageviews"),
            F.count_if(is_custom_event()).alias("events"),
            visitors_sketch(F.col("visitor_id")).alias("visitors_sketch"),
            F.collect_list(F.when(_site_total() & is_engagement(), F.col("engagement_ms"))).alias("engagement_values"),
            F.collect_list(F.when(_site_total() & is_pageview(), F.col("load_ms"))).alias("load_values"),
        )
        .select(
            "site_id",
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "dimension",
            "value",
            "pageviews",
            "events",
            "visitors_sketch",
            "engagement_values",
            "load_values",
        )
    )


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
