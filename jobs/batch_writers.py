"""What each view query's micro-batch writes (the sinks of ``jobs/streaming.py``).

Every sink is a MERGE of absolute values over the range the batch touched, so a replayed
micro-batch writes the same rows again. The traffic sink also journals the minutes it wrote for
the roll-ups (``jobs/rollups.py``); the sessions sink re-rolls the visits of the hours and days
it touched; the rate-limit sink publishes blocks to ``ratelimit.blocks``.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable

from confluent_kafka import Producer
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs import ratelimit, sessions, traffic, vitals
from jobs.delta_sink import rewrite_apart, straddling_from, upsert
from jobs.rollup_journal import Touched
from jobs.rollups import ViewRollups, days_between, read_range, truncate
from tally.log import kv
from tally.settings import Settings
from tally.site_registry import SiteRegistry
from tally.tables import EVENTS, PROPS_1D, RATELIMIT, SESSIONS, TRAFFIC_1M, VISITS_1D, VISITS_1H, VITALS_1H, ViewSpec

log = logging.getLogger("tally.jobs.streaming")

BatchWriter = Callable[[DataFrame, int], None]


def _touched(rows: DataFrame, ts_column: str) -> Touched | None:
    """Sites and the first/last timestamp a batch touched, or None for an empty batch."""
    found = rows.agg(F.collect_set("site_id"), F.min(ts_column), F.max(ts_column)).first()
    if found is None or found[1] is None:
        return None
    return Touched(frozenset(found[0]), found[1], found[2])


def _upsert_windows(rows: DataFrame, spec: ViewSpec, settings: Settings) -> Touched | None:
    """MERGE a batch's windows into ``spec`` over the range they touch; that range, or None for an empty batch."""
    touched = _touched(rows, "window_start")
    if touched is not None:
        lo, hi = touched.first, touched.last
        upsert(rows, spec, settings, dates=days_between(lo, hi), within=("window_start", lo, hi))
    return touched


# The 1-minute view's rows of minutes no longer open are moved to files of their own in spans of this
# length, so the MERGE of the open minutes rewrites only their file, not the whole day's (settle_range).
SETTLED_SPAN = dt.timedelta(minutes=15)


def settle_range(
    newest: dt.datetime, watermark: dt.timedelta, settled_until: dt.datetime | None, span: dt.timedelta = SETTLED_SPAN
) -> tuple[dt.datetime, dt.datetime] | None:
    """The minutes the traffic sink moves apart after writing a batch whose newest minute is ``newest``:
    from where it last stopped (``settled_until``; None after a start: the start of the date) to the end
    of the last whole ``span`` of the date that the watermark, with a minute to spare, has passed; None
    when that is nothing new. Only an efficiency: a late row merged into a settled minute is still right.
    """
    closed = newest - watermark - dt.timedelta(minutes=1)
    day_start = dt.datetime.combine(closed.date(), dt.time(), tzinfo=closed.tzinfo)
    hi = day_start + span * ((closed - day_start) // span)
    lo = day_start if settled_until is None or settled_until < day_start else settled_until
    return (lo, hi) if lo < hi else None


def settle(
    spark: SparkSession,
    settings: Settings,
    newest: dt.datetime,
    settled_until: dt.datetime | None,
    *,
    spec: ViewSpec = TRAFFIC_1M,
) -> dt.datetime | None:
    """After a traffic batch whose newest minute is ``newest``: move the minutes a newly closed span
    ends (:func:`settle_range`) out of the files that also hold open minutes; return where settling
    stands now (``settled_until`` again if nothing new closed). A move that fails is logged and not
    retried: the 1-minute view goes on, and the next span's move takes those rows too.

    Only the rows of files that also hold open minutes move, as the Delta log's file statistics say:
    after a start, none if the job before this one moved them.
    """
    # PySpark hands timestamps back as naive local times; the table's literals and statistics are UTC.
    newest = newest.astimezone(dt.UTC).replace(tzinfo=None)
    found = settle_range(newest, settings.spark.watermark, settled_until)
    if found is None:
        return settled_until
    hi = found[1]
    began = time.monotonic()
    try:
        lo = straddling_from(settings, spec, day=hi.date(), column="window_start", at=hi)
        if lo is not None:
            rewrite_apart(spark, spec, settings, column="window_start", lo=lo, hi=hi, attempts=2)
    except Exception as e:  # only an efficiency: it must not stop the 1-minute view
        # The next span's move takes these rows too (they still straddle it), so this span is not retried.
        log.error("could not settle traffic minutes", extra=kv(until=str(hi), error=str(e)[:2000]), exc_info=True)
        return hi
    if lo is not None:
        seconds = round(time.monotonic() - began, 1)
        log.info("traffic minutes settled", extra=kv(first=str(lo), until=str(hi), seconds=seconds))
    return hi


def write_traffic(settings: Settings, rollups: ViewRollups) -> BatchWriter:
    settled_until: list[dt.datetime | None] = [None]  # where settling stands, in this process

    def write(batch: DataFrame, batch_id: int) -> None:
        began = time.monotonic()
        minutes = traffic.with_digests(batch).persist()
        try:
            touched = _touched(minutes, "window_start")
            if touched is None:
                return
            computed = time.monotonic()
            window = ("window_start", touched.first, touched.last)
            upsert(minutes, TRAFFIC_1M, settings, dates=days_between(touched.first, touched.last), within=window)
            merged = time.monotonic()
            rollups.touch(touched)
            log.info(
                "traffic batch written",
                extra=kv(
                    batch_id=batch_id,
                    first=str(touched.first),
                    last=str(touched.last),
                    compute_s=round(computed - began, 1),
                    merge_s=round(merged - computed, 1),
                    journal_s=round(time.monotonic() - merged, 2),
                ),
            )
            settled_until[0] = settle(batch.sparkSession, settings, touched.last, settled_until[0])
        finally:
            minutes.unpersist()

    return write


def write_sessions(settings: Settings) -> BatchWriter:
    def write(batch: DataFrame, batch_id: int) -> None:
        spark = batch.sparkSession
        touched = _touched(batch, "session_start")
        if touched is None:
            return
        sites, lo, hi = touched.sites, touched.first, touched.last
        upsert(batch, SESSIONS, settings, dates=days_between(lo, hi), within=("session_start", lo, hi))
        events = sessions.visit_events(batch)
        upsert(events, EVENTS, settings, dates=days_between(lo, hi), within=("visit_start", lo, hi))
        for grain, spec, step in (("hour", VISITS_1H, dt.timedelta(hours=1)), ("day", VISITS_1D, dt.timedelta(days=1))):
            first, last = truncate(lo, grain), truncate(hi, grain) + step
            span = read_range(SESSIONS, settings, spark, sites, first, last, "session_start")
            upsert(sessions.visits(span, grain), spec, settings, dates=days_between(lo, hi))  # type: ignore[arg-type]
        log.info("sessions batch written", extra=kv(batch_id=batch_id, sites=len(sites)))

    return write


def write_ratelimit(settings: Settings, sites: SiteRegistry) -> BatchWriter:
    """Upsert the counts, and publish a block for each client over its site's limit; ``sites``: the
    sites configured now (followed from the sites topic), so a runtime site's own limit counts."""
    producers: list[Producer] = []

    def write(batch: DataFrame, batch_id: int) -> None:
        if _upsert_windows(batch, RATELIMIT, settings) is None:
            return
        current = settings.with_sites(sites.sites())
        lowest_limit = min(
            [current.client_limit(s) for s in current.sites] + [current.ratelimit.client_pageviews_per_hour]
        )
        heavy = batch.where(F.col("pageviews") > lowest_limit).select(
            "site_id", "client_hash", "pageviews", F.unix_millis("window_end")
        )
        now_ms = int(time.time() * 1000)
        blocks = ratelimit.over_limit([tuple(r) for r in heavy.collect()], current, now_ms=now_ms)  # type: ignore[misc]
        if blocks and not producers:  # connect only once there is something to publish
            producers.append(Producer({**settings.kafka.client_config(), "enable.idempotence": True}))
        for block in blocks:
            key, value = block.record()
            producers[0].produce(settings.kafka.ratelimit_topic, key=key, value=value)
            log.warning(
                "client blocked by rate limit",
                extra=kv(
                    site=block.site_id, client=block.client_hash[:12], pageviews=block.pageviews, limit=block.limit
                ),
            )
        if blocks:
            producers[0].flush(10)

    return write


def write_props(settings: Settings) -> BatchWriter:
    def write(batch: DataFrame, batch_id: int) -> None:
        touched = _upsert_windows(batch, PROPS_1D, settings)
        if touched is None:
            return
        log.info("props batch written", extra=kv(batch_id=batch_id, sites=len(touched.sites)))

    return write


def write_vitals(settings: Settings) -> BatchWriter:
    def write(batch: DataFrame, batch_id: int) -> None:
        # The digests are built once, here, for the MERGE's two reads of its source.
        hours = vitals.with_digests(batch).persist()
        try:
            touched = _upsert_windows(hours, VITALS_1H, settings)
            if touched is None:
                return
            log.info("vitals batch written", extra=kv(batch_id=batch_id, sites=len(touched.sites)))
        finally:
            hours.unpersist()

    return write
