"""Backfill: recompute every view for a range of dates from ``raw.pageviews``.

It replays the archive through the same transform functions as the streaming job and
atomically replaces those dates in each view (Delta ``replaceWhere``), so running it twice
gives the same tables, and it counts the late events the stream had to drop.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from tqdm import tqdm

from jobs import ratelimit, sessions, traffic
from jobs.delta_sink import replace_dates, table_exists
from jobs.views import VIEW_FIELDS, with_event_ts
from tally.log import kv
from tally.settings import Settings
from tally.spans import spark_interval
from tally.tables import (
    ACTIVE_5M,
    BACKFILL_VIEWS,
    RATELIMIT,
    RAW_PAGEVIEWS,
    SESSIONS,
    TRAFFIC_1D,
    TRAFFIC_1H,
    TRAFFIC_1M,
    VISITS_1D,
    VISITS_1H,
    ViewSpec,
)

log = logging.getLogger("tally.jobs.backfill")


class BackfillError(Exception):
    """A backfill that cannot run; the message says what to do."""


@dataclass(frozen=True)
class BackfillPlan:
    start: dt.date
    end: dt.date
    site_id: str | None
    raw_events_by_date: dict[dt.date, int]

    @property
    def raw_events(self) -> int:
        return sum(self.raw_events_by_date.values())


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


def plan(spark: SparkSession, settings: Settings, start: dt.date, end: dt.date, site_id: str | None) -> BackfillPlan:
    """What a backfill would read: raw events per date (the ``--dry-run`` report)."""
    if end < start:
        raise BackfillError(f"--to {end} is before --from {start}")
    counts = raw_events(raw_rows(spark, settings, start, end, site_id)).groupBy("event_date").count().collect()
    return BackfillPlan(start, end, site_id, {r["event_date"]: r["count"] for r in counts})


@contextmanager
def _cached(frame: DataFrame) -> Iterator[DataFrame]:
    frame.persist()
    try:
        yield frame
    finally:
        frame.unpersist(blocking=True)  # freed before the next chunk caches its own


def compute_views(events: DataFrame, settings: Settings, start: dt.date, end: dt.date) -> dict[ViewSpec, DataFrame]:
    """Every view for dates ``start..end`` from a batch of events, by the streaming job's own transforms.

    ``events`` must cover those dates plus one session gap before them and one day after, so
    sessions that straddle midnight are whole. The windowed views read only the events their
    windows need: their dates, and the first minutes of the next day that the last active-visitor
    windows reach into. Callers keep only rows of their dates.
    """
    first = _midnight(start)
    after = _midnight(end + dt.timedelta(days=1)) + traffic.ACTIVE_WINDOW - traffic.ACTIVE_STEP
    windowed = events.where((F.col("event_ts") >= F.lit(first)) & (F.col("event_ts") < F.lit(after)))
    minutes = traffic.with_digests(traffic.traffic_minutes(windowed))
    hours = traffic.roll_up(minutes, "hour")
    visits = sessions.sessions(events, settings.spark.session_gap)
    return {
        TRAFFIC_1M: minutes,
        TRAFFIC_1H: hours,
        TRAFFIC_1D: traffic.roll_up(hours, "day"),
        ACTIVE_5M: traffic.active_visitors(minutes),
        SESSIONS: visits,
        VISITS_1H: sessions.visits(visits, "hour"),
        VISITS_1D: sessions.visits(visits, "day"),
        RATELIMIT: ratelimit.ratelimit_counts(windowed),
    }


def _midnight(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(), dt.UTC)


def backfill(
    spark: SparkSession,
    settings: Settings,
    *,
    start: dt.date,
    end: dt.date,
    site_id: str | None = None,
    progress: bool = True,
) -> BackfillPlan:
    """Recompute every view for ``start..end``, ``spark.backfill_chunk_days`` dates at a time.

    Each chunk replaces its dates in each view atomically, so memory stays bounded by a chunk
    whatever the range, and an interrupted backfill leaves every date either old or new.
    """
    if end < start:
        raise BackfillError(f"--to {end} is before --from {start}")
    step = dt.timedelta(days=max(1, settings.spark.backfill_chunk_days))
    chunks = []
    first = start
    while first <= end:
        chunks.append((first, min(end, first + step - dt.timedelta(days=1))))
        first += step
    counts: dict[dt.date, int] = {}
    bar = tqdm(total=len(chunks) * len(BACKFILL_VIEWS), desc="backfill", unit="view", disable=not progress)
    with bar:
        for chunk_start, chunk_end in chunks:
            counts |= _backfill_chunk(spark, settings, chunk_start, chunk_end, site_id, bar)
    return BackfillPlan(start, end, site_id, counts)


def _backfill_chunk(
    spark: SparkSession,
    settings: Settings,
    start: dt.date,
    end: dt.date,
    site_id: str | None,
    bar: tqdm,  # type: ignore[type-arg]
) -> dict[dt.date, int]:
    """Recompute every view for one chunk of dates; returns the raw events per date it read."""
    # Sessions near the range's edges need their neighbours: a gap before, a day after.
    since = F.lit(_midnight(start)) - F.expr(f"INTERVAL {spark_interval(settings.spark.session_gap)}")
    day = dt.timedelta(days=1)
    rows = raw_rows(spark, settings, start - day, end + day, site_id)
    # The views' map-side aggregates hold a partition's groups in memory, and a scan's partition can
    # be a whole day's file, so the events are cached spread over the raised partitions. They are
    # raised before the cache is declared, since a cache is planned then (the deduplication too).
    with (
        _enough_shuffle_partitions(spark, rows.count()) as partitions,
        _cached(raw_events(rows, since=since).repartition(partitions)) as events,
    ):
        by_date = {r["event_date"]: r["count"] for r in events.groupBy("event_date").count().collect()}
        counts = {d: n for d, n in by_date.items() if start <= d <= end}
        views = compute_views(events, settings, start, end)
        with _cached(views[TRAFFIC_1M]), _cached(views[TRAFFIC_1H]), _cached(views[SESSIONS]):
            for spec in BACKFILL_VIEWS:
                bar.set_postfix_str(f"{start}..{end} {spec.table}")
                began = time.monotonic()
                replace_dates(views[spec], spec, settings, start=start, end=end, site_id=site_id)
                seconds = round(time.monotonic() - began, 1)
                log.info("view backfilled", extra=kv(view=spec.table, start=str(start), end=str(end), seconds=seconds))
                bar.update()
    return counts


# At most this many events per shuffle partition in a backfill job. The views' aggregates (HLL
# sketches, value lists) hold a partition's groups in memory: on the default 1.5 GB driver, 10M
# events in 3-day jobs ran out of heap with 2 partitions (about 2M events each), and once more in
# the second job with 7 (600k each).
EVENTS_PER_SHUFFLE_PARTITION = 300_000


def shuffle_partitions_for(events: int, configured: int) -> int:
    """Shuffle partitions for a backfill job over ``events``: the session's ``configured`` ones (one
    per core by default, what the streaming job's small batches want), or more when the job is big."""
    return max(configured, -(-events // EVENTS_PER_SHUFFLE_PARTITION))


@contextmanager
def _enough_shuffle_partitions(spark: SparkSession, events: int) -> Iterator[int]:
    """Raise the session's shuffle partitions to ``shuffle_partitions_for(events)``, which it yields;
    restore them after."""
    before = spark.conf.get("spark.sql.shuffle.partitions") or "1"
    partitions = shuffle_partitions_for(events, int(before))
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    try:
        yield partitions
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", before)
