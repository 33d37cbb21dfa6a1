"""Visits: session windows per visitor (a visit ends after ``session_gap`` of inactivity), and
hourly / daily rollups of visits by entry page, exit page, source and audience dimensions.

A streaming session is final only once the watermark has passed its end plus the gap, so the
streaming job appends sessions when they close (about gap + watermark after the last event);
the realtime panel uses the hopping window instead.
"""

from __future__ import annotations

import datetime as dt

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.views import (
    GRAIN_INTERVAL,
    dimension_value,
    event_date,
    is_custom_event,
    is_engagement,
    is_pageview,
    reportable,
)
from tally.dimensions import ALL, AUDIENCE_DIMENSIONS, VISIT_DIMENSIONS, Grain
from tally.spans import spark_interval

# Attributes a visit takes from its first event (ties broken by event_id, so it is deterministic).
_FIRST_EVENT_FIELDS = AUDIENCE_DIMENSIONS


def _pageview_at() -> Column:
    return F.when(is_pageview(), F.struct(F.col("event_ts"), F.col("event_id"), F.col("path")))


def sessions(events: DataFrame, gap: dt.timedelta) -> DataFrame:
    """One row per visit: start, end, duration, page views, bounce, entry/exit page, source.

    Visits without a page view (only engagement or custom events after a long pause) are not
    visits and are left out.
    """
    first = F.min(F.struct(F.col("event_ts"), F.col("event_id"), *[F.col(c) for c in _FIRST_EVENT_FIELDS]))
    return (
        reportable(events)
        .groupBy(F.col("site_id"), F.col("visitor_id"), F.session_window("event_ts", spark_interval(gap)).alias("s"))
        .agg(
            F.min("event_ts").alias("session_start"),
            F.max("event_ts").alias("session_end"),
            F.count_if(is_pageview()).alias("pageviews"),
            F.count_if(is_custom_event()).alias("events"),
            F.coalesce(F.sum(F.when(is_engagement(), F.col("engagement_ms"))), F.lit(0)).alias("engaged_ms"),
            F.min(_pageview_at()).alias("entry"),
            F.max(_pageview_at()).alias("exit"),
            first.alias("first"),
        )
        .where(F.col("pageviews") > 0)
        .select(
            "site_id",
            "visitor_id",
            "session_start",
            "session_end",
            (F.unix_millis("session_end") - F.unix_millis("session_start")).alias("duration_ms"),
            "pageviews",
            "events",
            "engaged_ms",
            (F.col("pageviews") == 1).alias("bounce"),
            F.col("entry.path").alias("entry_page"),
            F.col("exit.path").alias("exit_page"),
            *[F.col(f"first.{c}").alias(c) for c in _FIRST_EVENT_FIELDS],
            event_date("session_start"),
        )
    )


def visits(sessions_rows: DataFrame, grain: Grain) -> DataFrame:
    """Visits, bounces, total duration and page views per site × dimension, by session start."""
    pairs = [F.struct(F.lit(ALL).alias("dimension"), F.lit("").alias("value"))]
    pairs += [
        F.struct(F.lit(n).alias("dimension"), dimension_value(c).alias("value")) for n, c in VISIT_DIMENSIONS.items()
    ]
    exploded = sessions_rows.withColumn("dim", F.explode(F.array(*pairs)))
    start = F.date_trunc(grain, F.col("session_start"))
    return (
        exploded.groupBy(F.col("site_id"), start.alias("window_start"), F.col("dim.dimension"), F.col("dim.value"))
        .agg(
            F.count(F.lit(1)).alias("visits"),
            F.count_if(F.col("bounce")).alias("bounces"),
            F.sum("duration_ms").alias("duration_ms"),
            F.sum("pageviews").alias("pageviews"),
        )
        .select(
            "site_id",
            "window_start",
            (F.col("window_start") + F.expr(GRAIN_INTERVAL[grain])).alias("window_end"),
            "dimension",
            "value",
            "visits",
            "bounces",
            "duration_ms",
            "pageviews",
            event_date("window_start"),
        )
    )
