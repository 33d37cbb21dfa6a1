"""The views, as pure ``DataFrame -> DataFrame`` functions shared by streaming and backfill.

Nothing here reads or writes: the streaming job and the backfill supply the input frame
(Kafka or raw.pageviews) and own the sink, so both compute identical rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from tally.schema import spark_ddl


@dataclass(frozen=True)
class ViewSpec:
    """A derived table: its name, its key columns (for idempotent upserts) and partition column."""

    table: str
    keys: tuple[str, ...]
    partition_by: str


PAGEVIEWS_1M = ViewSpec("agg.pageviews_1m", ("site_id", "window_start", "page"), "event_date")


def events_from_kafka(kafka_rows: DataFrame) -> DataFrame:
    """Decode Kafka message values into typed event columns (v1 schema; unknown fields ignored)."""
    decoded = kafka_rows.select(F.from_json(F.col("value").cast("string"), spark_ddl()).alias("e"))
    return with_event_ts(decoded.select("e.*").where(F.col("event_id").isNotNull()))


def with_event_ts(events: DataFrame) -> DataFrame:
    """Add ``event_ts``, the skew-corrected event time as a timestamp (what windows use)."""
    return events.withColumn("event_ts", F.timestamp_millis(F.col("event_time")))


def reportable(events: DataFrame) -> DataFrame:
    """Reports exclude bots by default; raw keeps them (filtering is a view's decision)."""
    return events.where(~F.coalesce(F.col("is_bot"), F.lit(False)))


def _is_pageview() -> Column:
    return F.col("type") == "pageview"


def pageviews_per_minute(events: DataFrame) -> DataFrame:
    """Page views per site and page in 1-minute tumbling windows of event time."""
    window = F.window("event_ts", "1 minute")
    return (
        reportable(events)
        .where(_is_pageview())
        .groupBy(F.col("site_id"), window.alias("w"), F.col("path").alias("page"))
        .agg(F.count(F.lit(1)).alias("pageviews"))
        .select(
            "site_id",
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "page",
            "pageviews",
            F.to_date(F.col("w.start")).alias("event_date"),
        )
    )
