"""How a backfill splits its dates into Spark jobs: runs of consecutive dates whose raw events the
driver's heap holds, counted from the Delta log's file statistics without a scan; and the Spark
settings each job runs under, sized by its events."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager

import pyarrow as pa
from pyspark.sql import SparkSession

from tally.settings import Settings, jvm_size_bytes
from tally.storage import find_table
from tally.tables import RAW_PAGEVIEWS

# Raw events a backfill job reads per GiB of the driver's heap on a local master: its events are
# cached for the views to read, and their aggregates hold a partition's groups. A job reads its
# dates, the day after (visits crossing midnight) and a session gap before. On local[2]: 3-day jobs
# of 3M events (4M read) ran on a 1.5 GiB heap, 2.7M a GiB; 10M events in one 10-day job on 6 GiB,
# 1.7M a GiB (docs/OPERATIONS.md, "Where its time goes").
EVENTS_PER_GIB = 2_000_000

# With a raw file in the range that has no row count in the log (written without statistics), only
# the dates bound a job, and at most this many.
UNCOUNTED_CHUNK_DAYS = 7


def dates_between(start: dt.date, end: dt.date) -> list[dt.date]:
    """Every date of ``start..end``, inclusive."""
    return [start + dt.timedelta(days=i) for i in range((end - start).days + 1)]


def chunk_events(spark: SparkSession, settings: Settings) -> int:
    """At most this many raw events per backfill job: ``spark.backfill_chunk_events``, or with 0 what
    the driver's heap holds (``EVENTS_PER_GIB``). On a cluster, set it for the executors' memory."""
    if settings.spark.backfill_chunk_events > 0:
        return settings.spark.backfill_chunk_events
    heap = jvm_size_bytes(spark.sparkContext.getConf().get("spark.driver.memory", "1g"), "spark.driver.memory")
    return max(1, int(EVENTS_PER_GIB * heap / 2**30))


def raw_counts_by_date(settings: Settings, first: dt.date, last: dt.date) -> dict[dt.date, int] | None:
    """Rows of raw.pageviews per date of ``first..last``, every site's, from the Delta log's file
    statistics; None when a file of those dates has none. No table: no rows."""
    table = find_table(settings, RAW_PAGEVIEWS)
    if table is None:
        return {}
    files = pa.table(table.get_add_actions(flatten=True))
    counts: dict[dt.date, int] = {}
    for day, rows in zip(files["partition.event_date"].to_pylist(), files["num_records"].to_pylist(), strict=True):
        if not first <= day <= last:
            continue
        if rows is None:
            return None
        counts[day] = counts.get(day, 0) + rows
    return counts


def date_chunks(
    start: dt.date, end: dt.date, events_by_date: dict[dt.date, int] | None, *, max_events: int, max_days: int
) -> list[tuple[dt.date, dt.date]]:
    """``start..end`` as runs of consecutive dates, (first, last) each, of at most ``max_days`` dates
    and, where ``events_by_date`` is known, at most ``max_events`` events read: a run's own, and
    those of the day after it, which a job reads too. A date that does not fit even alone is a run
    of its own. Unknown counts (None) bound a run by at most ``UNCOUNTED_CHUNK_DAYS`` dates."""
    if events_by_date is None:
        events_by_date, max_days = {}, min(max_days, UNCOUNTED_CHUNK_DAYS)
    chunks: list[tuple[dt.date, dt.date]] = []
    held = 0
    for day in dates_between(start, end):
        events = events_by_date.get(day, 0)
        after = events_by_date.get(day + dt.timedelta(days=1), 0)
        last = chunks[-1] if chunks else None
        if last and (day - last[0]).days < max_days and held + events + after <= max_events:
            chunks[-1] = (last[0], day)
            held += events
        else:
            chunks.append((day, day))
            held = events
    return chunks


def plan_chunks(settings: Settings, start: dt.date, end: dt.date, max_events: int) -> list[tuple[dt.date, dt.date]]:
    """The backfill's jobs over ``start..end``: ``date_chunks`` of the raw table's counts."""
    counts = raw_counts_by_date(settings, start, end + dt.timedelta(days=1))
    return date_chunks(start, end, counts, max_events=max_events, max_days=settings.spark.backfill_chunk_days)


# At most this many events per shuffle partition in a backfill job. The views' aggregates (HLL
# sketches, value lists) hold a partition's groups in memory: on a 1.5 GB driver (the default then), 10M
# events in 3-day jobs ran out of heap with 2 partitions (about 2M events each), and once more in
# the second job with 7 (600k each).
EVENTS_PER_SHUFFLE_PARTITION = 300_000


def shuffle_partitions_for(events: int, configured: int) -> int:
    """Shuffle partitions for a backfill job over ``events``: the session's ``configured`` ones (one
    per core by default, what the streaming job's small batches want), or more when the job is big."""
    return max(configured, -(-events // EVENTS_PER_SHUFFLE_PARTITION))


# Spark's object hash aggregate (HLL sketches, value lists) sorts its input instead once a task
# holds this many groups; Spark's default is 128. A task holds about EVENTS_PER_SHUFFLE_PARTITION
# events spread by site and minute (``traffic.by_minute``): a few thousand minute rows of a dimension
# in 3-day jobs of 3M events, tens of thousands in a 7-day job of 700k. With the default, the minute
# rows of a 3-day job of 3M events took 26.5 s instead of 16.3 s. A group's state grows with its
# events (an HLL sketch stops at 16 KiB), so a task's memory stays bounded by its events.
OBJECT_AGGREGATE_GROUPS = 100_000


@contextmanager
def job_settings(spark: SparkSession, events: int) -> Iterator[int]:
    """Raise the session's shuffle partitions to ``shuffle_partitions_for(events)``, which it yields, and
    the groups its object aggregates hold before sorting to ``OBJECT_AGGREGATE_GROUPS``; restore both after."""
    partitions = shuffle_partitions_for(events, int(spark.conf.get("spark.sql.shuffle.partitions") or "1"))
    settings = {
        "spark.sql.shuffle.partitions": str(partitions),
        "spark.sql.objectHashAggregate.sortBased.fallbackThreshold": str(OBJECT_AGGREGATE_GROUPS),
    }
    before = {key: spark.conf.get(key) for key in settings}
    try:
        for key, value in settings.items():
            spark.conf.set(key, value)
        yield partitions
    finally:
        for key, old in before.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)
