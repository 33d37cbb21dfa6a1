"""Re-rolling the coarse traffic views (hours, days, 5-minute hopping windows) from the 1-minute view.

The 1-minute view is written by every micro-batch, so it is the low-latency one. Rolling the
coarser grains up after every batch would triple each batch's Delta commits, so the traffic
query only collects the minutes it touched, and the job's main thread rolls them up,
concurrently with the queries, on two clocks (:class:`ViewRollups`): the 5-minute realtime windows
at most every ``spark.rollup_seconds``, the hours and days (the reports) at most every
``spark.hours_rollup_seconds``. Each keeps the range it has not rolled up yet in a journal beside
the checkpoints (:class:`jobs.rollup_journal.PendingJournal`), written before the traffic batch commits, so a crash
cannot lose it: a freshly started job re-rolls the journal's range, plus the windows still
inside the watermark of the newest minute in the table.

The watermark alone is not enough: one batch of a backlog (a job catching up after a stop)
writes hours of minutes at once, and a second crash before the first roll-up would lose the
range a recovery had scheduled.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Collection
from typing import Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs import traffic
from jobs.delta_sink import read_view, upsert
from jobs.rollup_journal import Journal, Touched
from tally.log import kv
from tally.settings import Settings
from tally.storage import find_table
from tally.tables import ACTIVE_5M, TRAFFIC_1D, TRAFFIC_1H, TRAFFIC_1M, ViewSpec

log = logging.getLogger("tally.jobs.rollups")


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


# What a roll-up recomputes: the hours and days (read by the reports), or the 5-minute hopping
# windows (the dashboard's visitors of the last 5 minutes). Days are rolled from hours, so the two
# always go together.
Part = Literal["reports", "realtime"]
PARTS: tuple[Part, ...] = ("reports", "realtime")


def roll_up(spark: SparkSession, settings: Settings, touched: Touched, parts: Collection[Part] = PARTS) -> None:
    """Recompute the hours and days (``reports``) and the hopping windows (``realtime``) that
    contain any touched minute."""
    lo, hi = touched.first, touched.last
    if "reports" in parts:
        hour_lo, hour_hi = truncate(lo, "hour"), truncate(hi, "hour") + dt.timedelta(hours=1)
        hours = traffic.roll_up(read_range(TRAFFIC_1M, settings, spark, touched.sites, hour_lo, hour_hi), "hour")
        upsert(hours, TRAFFIC_1H, settings, dates=days_between(lo, hi), within=("window_start", hour_lo, hour_hi))
        day_lo, day_hi = truncate(lo, "day"), truncate(hi, "day") + dt.timedelta(days=1)
        days = traffic.roll_up(read_range(TRAFFIC_1H, settings, spark, touched.sites, day_lo, day_hi), "day")
        upsert(days, TRAFFIC_1D, settings, dates=days_between(lo, hi), within=("window_start", day_lo, day_hi))
    if "realtime" in parts:
        # Hopping windows holding a touched minute start up to 4 minutes before it.
        first, last = lo - dt.timedelta(minutes=4), hi + dt.timedelta(minutes=5)
        around = read_range(TRAFFIC_1M, settings, spark, touched.sites, first, last)
        active = traffic.active_visitors(around).where(
            (F.col("window_start") >= F.lit(first)) & (F.col("window_start") <= F.lit(hi))
        )
        upsert(active, ACTIVE_5M, settings, dates=days_between(first, hi), within=("window_start", first, hi))


def recent_minutes(spark: SparkSession, settings: Settings) -> Touched | None:
    """The minutes a restarted job re-rolls whatever its journals say: those still inside the watermark
    of the newest minute in ``agg.traffic_1m`` (None when the table has none). This runs a Spark job."""
    table = find_table(settings, TRAFFIC_1M.table)
    if table is None:
        return None
    dates = {p["event_date"] for p in table.partitions()}
    if not dates:
        return None
    newest = max(dates)
    uri = settings.table_uri(TRAFFIC_1M.table)
    recent = spark.read.format("delta").load(uri).where(F.col("event_date") == F.lit(newest))
    found = recent.agg(F.max("window_start"), F.collect_set("site_id")).first()
    if found is None or found[0] is None:
        return None
    lo = found[0] - settings.spark.watermark - dt.timedelta(minutes=1)
    log.info("rollups recovering after start", extra=kv(first=str(lo), last=str(found[0])))
    return Touched(frozenset(found[1]), lo, found[0])


class Rollups:
    """Collects touched minutes and rolls ``parts`` of them up when due (every ``every`` seconds;
    by default ``spark.rollup_seconds``); safe to call from several threads.

    ``recover_also`` are journals of other roll-ups whose ranges a recovery re-rolls too: a range
    journaled by one but not yet by another (a journal written before this one existed) is not lost.
    """

    def __init__(
        self,
        settings: Settings,
        journal: Journal | None = None,
        *,
        parts: tuple[Part, ...] = PARTS,
        every: float | None = None,
        recover_also: tuple[Journal, ...] = (),
    ) -> None:
        self.settings = settings
        self.journal = journal
        self.parts = parts
        self.every = settings.spark.rollup_seconds if every is None else every
        self.recover_also = recover_also
        self.pending: Touched | None = None
        self.rolling: Touched | None = None  # taken from ``pending`` by the roll-up running now
        self._last_run = 0.0
        self._lock = threading.Lock()  # guards ``pending``, ``rolling`` and the journal
        self._running = threading.Lock()  # one roll-up at a time

    def _save(self) -> None:
        """Journal what is not rolled up yet (called under ``_lock``)."""
        if self.journal is not None:
            self.journal.save(self.pending.union(self.rolling) if self.pending else self.rolling)

    def recover(self, spark: SparkSession) -> None:
        """After a (re)start: schedule every window a crashed run may not have rolled up."""
        self.recover_journals()
        recent = recent_minutes(spark, self.settings)
        if recent is not None:
            self.touch(recent)

    def recover_journals(self) -> None:
        """Schedule the ranges the journals hold (this roll-up's own, then ``recover_also``)."""
        journals = (self.journal, *self.recover_also) if self.journal is not None else self.recover_also
        for journal in journals:
            journaled = journal.load()
            if journaled is not None:
                self.touch(journaled)
                log.info(
                    "rollups recovering the journal",
                    extra=kv(parts=",".join(self.parts), first=str(journaled.first), last=str(journaled.last)),
                )

    def touch(self, touched: Touched) -> None:
        """Add a range to roll up; it is in the journal when this returns."""
        with self._lock:
            self.pending = touched.union(self.pending)
            self._save()

    def run_if_due(self, spark: SparkSession, *, force: bool = False) -> bool:
        """Roll up what is pending if ``every`` seconds have passed since the last roll-up (or ``force``).

        The pending range is taken under the lock and rolled up outside it, so the traffic query
        can keep recording minutes meanwhile; if the roll-up fails, the range goes back.
        """
        with self._running:
            with self._lock:
                due = force or time.monotonic() - self._last_run >= self.every
                if self.pending is None or not due:
                    return False
                touched, self.pending, self.rolling = self.pending, None, self.pending
            began = time.monotonic()
            rolled = False
            try:
                roll_up(spark, self.settings, touched, self.parts)
                rolled = True
            finally:  # the range leaves the journal only once rolled up; if the roll-up failed, it goes back
                with self._lock:
                    self.rolling = None
                    if not rolled:
                        self.pending = touched.union(self.pending)
                    self._save()
            self._last_run = time.monotonic()
        log.info(
            "rolled up",
            extra=kv(
                parts=",".join(self.parts),
                sites=len(touched.sites),
                first=str(touched.first),
                last=str(touched.last),
                seconds=round(self._last_run - began, 1),
            ),
        )
        return True


class ViewRollups:
    """The views job's roll-ups: the realtime windows every ``spark.rollup_seconds`` and the hours
    and days every ``spark.hours_rollup_seconds``, each with its own journal.

    Both are 30 s by default. The hours and days can be re-rolled less often to spare the cores:
    each run took about 15 s of the job's background pool in a soak, whatever range it covered (the
    realtime one about 9 s), though no latency of the 1-minute view was gained by it
    (docs/OPERATIONS.md, "The views' share of the cores"). The realtime roll-up's recovery re-rolls
    the reports' journal too, which covers a journal written before the two were split (it held
    every part).
    """

    def __init__(self, settings: Settings, *, journal: Callable[[str], Journal] | None = None) -> None:
        self.settings = settings
        reports = journal("rollups-pending.json") if journal is not None else None
        realtime = journal("rollups-realtime-pending.json") if journal is not None else None
        self.members = (
            Rollups(settings, realtime, parts=("realtime",), recover_also=(reports,) if reports is not None else ()),
            Rollups(settings, reports, parts=("reports",), every=settings.spark.hours_rollup_seconds),
        )

    def recover(self, spark: SparkSession) -> None:
        """After a (re)start: every roll-up schedules its journals' ranges and the recent minutes
        (read once for both)."""
        for member in self.members:
            member.recover_journals()
        recent = recent_minutes(spark, self.settings)
        if recent is not None:
            self.touch(recent)

    def touch(self, touched: Touched) -> None:
        """Add a range to every roll-up; it is in both journals when this returns."""
        for member in self.members:
            member.touch(touched)

    def run_if_due(self, spark: SparkSession, *, force: bool = False) -> bool:
        """Run each roll-up that is due (all with ``force``); True if any ran.

        One that fails does not hold the other up (its range stays journaled); the first failure
        is raised once both have had their turn.
        """
        ran, failures = False, []
        for member in self.members:
            try:
                ran = member.run_if_due(spark, force=force) or ran
            except Exception as e:  # raised below, once the other roll-up has had its turn
                log.error("roll-up failed", extra=kv(parts=",".join(member.parts), error=str(e)[:2000]))
                failures.append(e)
        if failures:
            raise failures[0]
        return ran
