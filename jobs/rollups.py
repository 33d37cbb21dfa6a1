"""Re-rolling the coarse traffic views (hours, days, 5-minute hopping windows) from the 1-minute view.

The 1-minute view is written by every micro-batch, so it is the low-latency one. Rolling the
coarser grains up after every batch would triple each batch's Delta commits, so the traffic
query only collects the minutes it touched, and the job's main thread rolls them up at most
every ``spark.rollup_seconds``, concurrently with the queries. A crash can lose the collected
range, so a freshly started job first re-rolls everything a crashed run could have left
behind: windows still inside the watermark of the newest minute in the table, since older
minutes can no longer change.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs import traffic
from jobs.delta_sink import read_view, upsert
from jobs.views import ACTIVE_5M, TRAFFIC_1D, TRAFFIC_1H, TRAFFIC_1M, ViewSpec
from tally.log import kv
from tally.settings import Settings
from tally.storage import find_table

log = logging.getLogger("tally.jobs.rollups")


@dataclass(frozen=True)
class Touched:
    """Sites and the first and last 1-minute window a set of batches wrote."""

    sites: frozenset[str]
    first: dt.datetime
    last: dt.datetime

    def union(self, other: Touched | None) -> Touched:
        if other is None:
            return self
        return Touched(self.sites | other.sites, min(self.first, other.first), max(self.last, other.last))


def days_between(lo: dt.datetime, hi: dt.datetime) -> list[dt.date]:
    """The UTC dates from ``lo`` to ``hi`` inclusive: the partitions a range can touch."""
    return [lo.date() + dt.timedelta(days=i) for i in range((hi.date() - lo.date()).days + 1)]


def truncate(ts: dt.datetime, grain: str) -> dt.datetime:
    if grain == "hour":
        return ts.replace(minute=0, second=0, microsecond=0)
    return ts.replace(hour=0, minute=0, second=0, microsecond=0)


def read_range(
    spec: ViewSpec,
    settings: Settings,
    spark: SparkSession,
    sites: frozenset[str],
    lo: dt.datetime,
    hi: dt.datetime,
    column: str = "window_start",
) -> DataFrame:
    """Rows of a view for some sites with ``lo <= column < hi`` (partitions pruned by date)."""
    table = read_view(spark, spec, settings)
    assert table is not None, f"{spec.table} must exist before it is rolled up"
    in_dates = F.col("event_date").isin(days_between(lo, hi))
    in_window = (F.col(column) >= F.lit(lo)) & (F.col(column) < F.lit(hi))
    return table.where(in_dates & F.col("site_id").isin(sorted(sites)) & in_window)


def roll_up(spark: SparkSession, settings: Settings, touched: Touched) -> None:
    """Recompute the hours, days and hopping windows that contain any touched minute."""
    lo, hi = touched.first, touched.last
    hour_lo, hour_hi = truncate(lo, "hour"), truncate(hi, "hour") + dt.timedelta(hours=1)
    hours = traffic.roll_up(read_range(TRAFFIC_1M, settings, spark, touched.sites, hour_lo, hour_hi), "hour")
    upsert(hours, TRAFFIC_1H, settings, dates=days_between(lo, hi), within=("window_start", hour_lo, hour_hi))
    day_lo, day_hi = truncate(lo, "day"), truncate(hi, "day") + dt.timedelta(days=1)
    days = traffic.roll_up(read_range(TRAFFIC_1H, settings, spark, touched.sites, day_lo, day_hi), "day")
    upsert(days, TRAFFIC_1D, settings, dates=days_between(lo, hi), within=("window_start", day_lo, day_hi))
    # Hopping windows holding a touched minute start up to 4 minutes before it.
    first, last = lo - dt.timedelta(minutes=4), hi + dt.timedelta(minutes=5)
    around = read_range(TRAFFIC_1M, settings, spark, touched.sites, first, last)
    active = traffic.active_visitors(around).where(
        (F.col("window_start") >= F.lit(first)) & (F.col("window_start") <= F.lit(hi))
    )
    upsert(active, ACTIVE_5M, settings, dates=days_between(first, hi), within=("window_start", first, hi))


class Rollups:
    """Collects touched minutes and rolls them up when due; safe to call from several threads."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.pending: Touched | None = None
        self._last_run = 0.0
        self._lock = threading.Lock()  # guards ``pending``
        self._running = threading.Lock()  # one roll-up at a time

    def recover(self, spark: SparkSession) -> None:
        """After a (re)start: schedule every window a crashed run may not have rolled up."""
        uri = self.settings.table_uri(TRAFFIC_1M.table)
        table = find_table(self.settings, TRAFFIC_1M.table)
        if table is None:
            return
        dates = {p["event_date"] for p in table.partitions()}
        if not dates:
            return
        newest = max(dates)
        recent = spark.read.format("delta").load(uri).where(F.col("event_date") == F.lit(newest))
        found = recent.agg(F.max("window_start"), F.collect_set("site_id")).first()
        if found is None or found[0] is None:
            return
        watermark = spark.sql(f"SELECT INTERVAL {self.settings.spark.watermark}").first()[0]  # type: ignore[index]
        lo = found[0] - watermark - dt.timedelta(minutes=1)
        self.touch(Touched(frozenset(found[1]), lo, found[0]))
        log.info("rollups recovering after start", extra=kv(first=str(lo), last=str(found[0])))

    def touch(self, touched: Touched) -> None:
        with self._lock:
            self.pending = touched.union(self.pending)

    def run_if_due(self, spark: SparkSession, *, force: bool = False) -> bool:
        """Roll up what is pending if ``spark.rollup_seconds`` have passed (or ``force``).

        The pending range is taken under the lock and rolled up outside it, so the traffic query
        can keep recording minutes meanwhile; if the roll-up fails, the range goes back.
        """
        with self._running:
            with self._lock:
                due = force or time.monotonic() - self._last_run >= self.settings.spark.rollup_seconds
                if self.pending is None or not due:
                    return False
                touched, self.pending = self.pending, None
            began = time.monotonic()
            try:
                roll_up(spark, self.settings, touched)
            except Exception:
                self.touch(touched)
                raise
            self._last_run = time.monotonic()
        log.info(
            "rolled up",
            extra=kv(
                sites=len(touched.sites),
                first=str(touched.first),
                last=str(touched.last),
                seconds=round(self._last_run - began, 1),
            ),
        )
        return True
