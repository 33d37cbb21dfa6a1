"""Visits: session windows per visitor (a visit ends after ``session_gap`` of inactivity), the
events of each visit with the visit's id, place and attributes (agg.events), and hourly / daily
rollups of visits by entry page, exit page, source and audience dimensions.

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
from tally.dimensions import ALL, AUDIENCE_DIMENSIONS, VISIT_DIMENSIONS, Grain, visit_column
from tally.spans import spark_interval
from tally.tables import SESSIONS

# Attributes a visit takes from its first event (ties broken by event_id, so it is deterministic).
_FIRST_EVENT_FIELDS = AUDIENCE_DIMENSIONS
# What agg.events keeps of each event's own columns, beside its visit's.
EVENT_FIELDS = ("event_id", "event_ts", "type", "name", "path", "props", "engagement_ms", *AUDIENCE_DIMENSIONS)
(_CARRIED,) = SESSIONS.carried  # a visit's events, as the sessions frame carries them


def _pageview_at() -> Column:
    return F.when(is_pageview(), F.struct(F.col("event_ts"), F.col("event_id"), F.col("path")))


def sessions(events: DataFrame, gap: dt.timedelta) -> DataFrame:
    """One row per visit: start, end, duration, page views, bounce, entry/exit page, source, and
    the visit's events (``visit_events``, carried for :func:`visit_events`, not written to agg.sessions).

    Visits without a page view (only engagement or custom events after a long pause) are not
    visits and are left out, with their events.
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
            F.collect_list(F.struct(*EVENT_FIELDS)).alias(_CARRIED),
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
            _CARRIED,
        )
    )


def _earlier(a: Column, b: Column) -> Column:
    """An ``array_sort`` comparator: events by time, then id (the order that picks a visit's first event)."""
    return (
        F.when(a["event_ts"] < b["event_ts"], -1)
        .when(a["event_ts"] > b["event_ts"], 1)
        .when(a["event_id"] < b["event_id"], -1)
        .when(a["event_id"] > b["event_id"], 1)
        .otherwise(0)
    )


def _own(column: str) -> Column:
    """An event's own column in agg.events; properties NULL when it has none (ingest may send an empty object)."""
    value = F.col(f"e.{column}")
    return (F.when(F.size(value) > 0, value) if column == "props" else value).alias(column)


def visit_events(sessions_rows: DataFrame) -> DataFrame:
    """agg.events from :func:`sessions`' rows: one row per event of each visit, its own columns
    beside its visit's id (the first event's id), its place in the visit (1 for the first, by time
    then id) and the visit's start, entry page and first-event attributes (``visit_<name>``)."""
    ordered = sessions_rows.withColumn(_CARRIED, F.array_sort(_CARRIED, _earlier))
    exploded = ordered.select(
        "*", F.col(_CARRIED)[0]["event_id"].alias("visit_id"), F.posexplode(_CARRIED).alias("place", "e")
    )
    return exploded.select(
        "site_id",
        "visitor_id",
        *[_own(c) for c in EVENT_FIELDS],
        "visit_id",
        (F.col("place") + 1).alias("visit_seq"),
        F.col("session_start").alias("visit_start"),
        F.col("entry_page").alias(visit_column("entry_page")),
        *[F.col(c).alias(visit_column(c)) for c in _FIRST_EVENT_FIELDS],
        "event_date",
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
