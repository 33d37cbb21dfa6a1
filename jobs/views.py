"""The derived views: their tables, and the event-decoding steps every view starts from.

Each view's logic is a pure ``DataFrame -> DataFrame`` function (``jobs/traffic.py``,
``jobs/sessions.py``, ``jobs/ratelimit.py``, ``jobs/props.py``, ``jobs/vitals.py``) shared by the streaming
job and the backfill.
Nothing here reads or writes: the caller supplies the input (Kafka or ``raw.pageviews``) and
owns the sink, so both paths compute identical rows.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from tally.dimensions import NONE_VALUE, Grain
from tally.schema import spark_ddl
from tally.vitals import SCROLL_DEPTH_COLUMN, VITALS

GRAIN_INTERVAL: dict[Grain, str] = {"hour": "INTERVAL 1 HOUR", "day": "INTERVAL 1 DAY"}

# The event fields the views read (schema order). A backfill reads only these from raw.pageviews:
# the widest fields (url, referrer, title, utm_*) are for ad-hoc queries of the raw table, and
# carrying them through the deduplication and the cache took a 3-day job's first 83 s to 55 s.
# ``props`` is read for agg.props_1d; it is an empty map on nearly every event.
VIEW_FIELDS = (
    "event_id",
    "type",
    "name",
    "site_id",
    "path",
    "event_time",
    "props",
    "engagement_ms",
    "load_ms",
    *(vital.column for vital in VITALS),  # agg.vitals_1h
    SCROLL_DEPTH_COLUMN,
    "visitor_id",
    "client_hash",
    "browser",
    "os",
    "device",
    "is_bot",
    "country",
    "region",
    "city",
    "source",
    "channel",
    "campaign",
)


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


def is_pageview() -> Column:
    return F.col("type") == "pageview"


def is_custom_event() -> Column:
    return F.col("type") == "event"


def is_engagement() -> Column:
    return F.col("type") == "engagement"


def dimension_value(column: str) -> Column:
    """A dimension's value, with missing ones grouped under ``(none)`` rather than dropped."""
    return F.coalesce(F.col(column).cast("string"), F.lit(NONE_VALUE))


def event_date(ts_column: str) -> Column:
    """The partition column: the UTC date of a window or session start."""
    return F.to_date(F.col(ts_column)).alias("event_date")
