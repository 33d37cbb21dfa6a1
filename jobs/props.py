"""Custom properties view: events and ≈ visitors per site, UTC day, event name, property key and value.

Only non-bot custom events with properties count. One row per (event, property) feeds a 1-day
tumbling window, so the streaming job (update mode: a changed day's whole row each time) and
the backfill write the same absolute rows. The rows are stored unfolded; the bounds of
``tally.props`` (the 100 keys, the ``(other)`` values) are applied by the reader, because they
depend on a whole day's rows.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.sketch_columns import visitors_sketch
from jobs.views import dimension_value, event_date, is_custom_event, reportable
from tally.dimensions import NONE_VALUE


def with_properties(events: DataFrame) -> DataFrame:
    """The events the view counts: non-bot custom events with at least one property."""
    return reportable(events).where(is_custom_event() & (F.size(F.col("props")) > 0))


def property_events(events: DataFrame) -> DataFrame:
    """One row per property of each non-bot custom event (ingest allows at most 20 per event)."""
    custom = with_properties(events)
    exploded = custom.select(
        "site_id",
        "event_ts",
        "visitor_id",
        dimension_value("name").alias("name"),
        F.explode(F.col("props")).alias("key", "value"),
    )
    return exploded.withColumn("value", F.coalesce(F.col("value"), F.lit(NONE_VALUE)))


def props_days(events: DataFrame) -> DataFrame:
    """agg.props_1d rows: events and a visitors sketch per site, day, event name, key and value."""
    day = F.window("event_ts", "1 day")
    return (
        property_events(events)
        .groupBy(F.col("site_id"), day.alias("w"), F.col("name"), F.col("key"), F.col("value"))
        .agg(F.count(F.lit(1)).alias("events"), visitors_sketch(F.col("visitor_id")).alias("visitors_sketch"))
        .select(
            "site_id",
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "name",
            "key",
            "value",
            "events",
            "visitors_sketch",
            event_date("w.start"),
        )
    )
