"""Delta sinks for the views: idempotent upserts (streaming) and atomic date replacement (backfill)."""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import TypeVar

import pyarrow as pa
from delta.tables import DeltaTable
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tally.log import kv
from tally.settings import Settings
from tally.storage import find_table
from tally.tables import ViewSpec

log = logging.getLogger("tally.jobs.sink")

T = TypeVar("T")

# The streaming job and a backfill may commit to the same table at once; Delta's optimistic
# concurrency then fails one of them, which simply tries again on the new snapshot.
_CONFLICT_MARKERS = ("Concurrent", "DELTA_CONCURRENT", "ProtocolChanged", "MetadataChanged")


def retry_on_conflict(action: Callable[[], T], *, what: str, attempts: int = 8) -> T:
    """Run a Delta write, retrying with backoff when a concurrent commit conflicts with it."""
    for attempt in range(1, attempts + 1):
        try:
            return action()
        except PySparkException as e:
            if attempt == attempts or not any(m in str(e) for m in _CONFLICT_MARKERS):
                raise
            log.warning("delta commit conflict, retrying", extra=kv(table=what, attempt=attempt))
            time.sleep(min(0.2 * 2**attempt, 5.0))
    raise AssertionError("unreachable")


def table_exists(spark: SparkSession, uri: str) -> bool:
    return DeltaTable.isDeltaTable(spark, uri)


_created: set[str] = set()  # tables this process has already created (or found)


def upsert(
    batch: DataFrame,
    spec: ViewSpec,
    settings: Settings,
    *,
    dates: list[dt.date] | None = None,
    within: tuple[str, dt.datetime, dt.datetime] | None = None,
) -> None:
    """MERGE view rows into the view's table by its keys, creating the table on first use.

    Rows carry absolute values (whole windows, whole sessions), so replaying a micro-batch
    after a crash writes the same values again: the sink is idempotent. ``dates``, when the
    caller knows them, saves a pass over the batch to find its partitions. ``within`` =
    (key column, lo, hi), when every batch row has ``lo <= column <= hi``, lets Delta skip the
    files of the day whose range of that column lies outside: a micro-batch touching the last
    minutes then reads a few files instead of the whole day's. Columns the view only carries
    (``spec.carried``) are not written.
    """
    batch = batch.drop(*spec.carried)
    spark = batch.sparkSession
    uri = settings.table_uri(spec.table)
    if dates is None:
        dates = [r[0] for r in batch.select(spec.partition_by).distinct().collect()]
    if not dates:
        return
    if uri not in _created:
        (
            DeltaTable.createIfNotExists(spark)
            .location(uri)
            .addColumns(batch.schema)
            .partitionedBy(spec.partition_by)
            .execute()
        )
        _created.add(uri)
    # The literal date list lets Delta prune partitions: a MERGE must not scan the whole table.
    in_dates = ", ".join(f"DATE'{d}'" for d in sorted(set(dates)))
    condition = F.expr(
        " AND ".join([f"t.`{spec.partition_by}` IN ({in_dates})", *(f"t.`{k}` <=> s.`{k}`" for k in spec.keys)])
    )
    if within is not None:
        column, lo, hi = within
        assert column in spec.keys, f"{column} must be a key of {spec.table}: a matching row shares its value"
        condition = condition & F.col(f"t.`{column}`").between(F.lit(lo), F.lit(hi))

    def merge() -> None:
        (
            DeltaTable.forPath(spark, uri)
            .alias("t")
            .merge(batch.alias("s"), condition)
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll()
            .withSchemaEvolution()  # additive: a view's new column (agg.sessions' region) joins an older table
            .execute()
        )

    retry_on_conflict(merge, what=spec.table)


def rewrite_apart(
    spark: SparkSession,
    spec: ViewSpec,
    settings: Settings,
    *,
    column: str,
    lo: dt.datetime,
    hi: dt.datetime,
    attempts: int = 8,
) -> None:
    """Rewrite the view's rows with ``lo <= column < hi`` (one date: ``lo``'s) into files of their own, in one commit.

    The rows stay the same. A MERGE rewrites every file holding a row it updates, whole, so rows that no
    longer change, left in the file of those that still do, are copied again by every MERGE after them.
    """
    day = lo.date()
    assert hi <= lo.replace(hour=0, minute=0, second=0, microsecond=0) + dt.timedelta(days=1), "one date at a time"
    uri = settings.table_uri(spec.table)
    condition = (
        f"{spec.partition_by} = DATE'{day.isoformat()}'"
        f" AND {column} >= TIMESTAMP'{lo.isoformat(sep=' ')}' AND {column} < TIMESTAMP'{hi.isoformat(sep=' ')}'"
    )

    def overwrite() -> None:
        # Read inside the retry: after a conflict the rows come from the new snapshot.
        rows = spark.read.format("delta").load(uri).where(F.expr(condition))
        rows.write.format("delta").mode("overwrite").option("replaceWhere", condition).save(uri)

    retry_on_conflict(overwrite, what=spec.table, attempts=attempts)


def straddling_from(
    settings: Settings, spec: ViewSpec, *, day: dt.date, column: str, at: dt.datetime
) -> dt.datetime | None:
    """The earliest ``column`` value in the files of date ``day`` that hold rows on both sides of ``at``
    (from the files' statistics in the Delta log, read with delta-rs); None if no file does.

    Those are the rows :func:`rewrite_apart` must move for no file to straddle ``at``. A file without
    statistics counts as straddling from the start of the date.
    """
    table = find_table(settings, spec.table)
    if table is None:
        return None
    files = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    start = dt.datetime.combine(day, dt.time())
    found: dt.datetime | None = None
    for f in files:
        if f.get(f"partition.{spec.partition_by}") != day:
            continue
        lo, hi = f.get(f"min.{column}"), f.get(f"max.{column}")
        lo = start if lo is None else lo.replace(tzinfo=None)  # UTC, as the job's timestamps
        if (hi is None or hi.replace(tzinfo=None) >= at) and lo < at:
            found = lo if found is None else min(found, lo)
    return found


def replace_dates(
    rows: DataFrame, spec: ViewSpec, settings: Settings, *, start: dt.date, end: dt.date, site_id: str | None
) -> None:
    """Atomically replace the view's rows for dates ``start..end`` (and one site, if given); columns
    the view only carries (``spec.carried``) are not written."""
    rows = rows.drop(*spec.carried)
    condition = f"{spec.partition_by} >= '{start.isoformat()}' AND {spec.partition_by} <= '{end.isoformat()}'"
    if site_id is not None:
        condition += f" AND site_id = '{site_id.replace(chr(39), chr(39) * 2)}'"
    in_range = rows.where(F.expr(condition))

    def overwrite() -> None:
        (
            in_range.write.format("delta")
            .mode("overwrite")
            .option("replaceWhere", condition)
            .option("mergeSchema", "true")  # additive evolution, as upsert's
            .partitionBy(spec.partition_by)
            .save(settings.table_uri(spec.table))
        )

    retry_on_conflict(overwrite, what=spec.table)


def read_view(spark: SparkSession, spec: ViewSpec, settings: Settings) -> DataFrame | None:
    """The view's table, or None if nothing has written it yet."""
    uri = settings.table_uri(spec.table)
    return spark.read.format("delta").load(uri) if table_exists(spark, uri) else None
