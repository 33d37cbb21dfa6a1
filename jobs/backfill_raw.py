"""The raw events a backfill job reads: ``raw.pageviews`` rows of its dates, and those rows as the
views read them, each ``event_id`` once."""

from __future__ import annotations

import datetime as dt

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.delta_sink import table_exists
from jobs.views import VIEW_FIELDS, with_event_ts
from tally.settings import Settings
from tally.tables import RAW_PAGEVIEWS


class BackfillError(Exception):
    """A backfill that cannot run; the message says what to do."""


def raw_rows(spark: SparkSession, settings: Settings, start: dt.date, end: dt.date, site_id: str | None) -> DataFrame:
    """``raw.pageviews`` rows of dates ``start..end`` (inclusive), of one site if given, as stored."""
    uri = settings.table_uri(RAW_PAGEVIEWS)
    if not table_exists(spark, uri):
        raise BackfillError(f"no raw table at {uri}: start the archiver (`tally up`) and send events first")
    raw = spark.read.format("delta").load(uri).where(F.col("event_date").between(F.lit(start), F.lit(end)))
    return raw if site_id is None else raw.where(F.col("site_id") == site_id)


def raw_events(rows: DataFrame, *, since: Column | None = None) -> DataFrame:
    """``raw_rows`` as the views read them: their fields and event time, from ``since`` on if given,
    deduplicated on ``event_id`` (the stream drops duplicates too).

    raw.pageviews is unique on event_id but for a retry that reached the archiver after its
    deduplication window, so the duplicated ids are found first, by a shuffle of the ids alone,
    and only their rows are deduplicated. Shuffling every row through ``dropDuplicates`` took a
    3-day job of 3M events 15 s longer. Where nothing is dropped, the rows keep the scan's
    partitions. This runs a Spark job.
    """
    raw = with_event_ts(rows.select(*VIEW_FIELDS, "event_date"))
    if since is not None:  # before the deduplication, which Spark cannot push a filter through
        raw = raw.where(F.col("event_ts") >= since)
    duplicated = raw.groupBy("event_id").count().where(F.col("count") > 1).select("event_id")
    found = [r["event_id"] for r in duplicated.limit(MAX_DUPLICATED_IDS + 1).collect()]
    if len(found) > MAX_DUPLICATED_IDS:
        return raw.dropDuplicates(["event_id"])
    if found:
        ids = F.broadcast(raw.sparkSession.createDataFrame([(i,) for i in found], "event_id string"))
        once = raw.join(ids, "event_id", "left_semi").dropDuplicates(["event_id"])
        raw = raw.join(ids, "event_id", "left_anti").unionByName(once)
    return raw


# At most this many duplicated event_ids are dropped by a broadcast join; with more, the backfill
# deduplicates every row by a shuffle.
MAX_DUPLICATED_IDS = 100_000
