"""Backfill: recompute every view for a range of dates from ``raw.pageviews``.

It replays the archive through the same transform functions as the streaming job and
atomically replaces those dates in each view (Delta ``replaceWhere``), so running it twice
gives the same tables, and it counts the late events the stream had to drop.

A date with no raw events (of the site, if one is given) is left as it is, unless the caller
allows empty dates: after retention or ``forget --before`` the views are that date's only record.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from tqdm import tqdm

from jobs import props, ratelimit, sessions, traffic, vitals
from jobs.backfill_chunks import chunk_events, dates_between, job_settings, plan_chunks
from jobs.backfill_raw import BackfillError as BackfillError
from jobs.backfill_raw import raw_events, raw_rows
from jobs.delta_sink import replace_dates
from jobs.write_pool import Stopped, write_each
from tally.log import kv
from tally.settings import Settings
from tally.spans import spark_interval
from tally.tables import (
    ACTIVE_5M,
    BACKFILL_VIEWS,
    EVENTS,
    PROPS_1D,
    RATELIMIT,
    SESSIONS,
    TRAFFIC_1D,
    TRAFFIC_1H,
    TRAFFIC_1M,
    VISITS_1D,
    VISITS_1H,
    VITALS_1H,
    ViewSpec,
)

log = logging.getLogger("tally.jobs.backfill")


@dataclass(frozen=True)
class BackfillPlan:
    """What a backfill reads and writes: raw events per date, and the dates it replaces or keeps."""

    start: dt.date
    end: dt.date
    site_id: str | None
    raw_events_by_date: dict[dt.date, int]
    allow_empty: bool = False

    @property
    def raw_events(self) -> int:
        return sum(self.raw_events_by_date.values())

    @property
    def dates(self) -> list[dt.date]:
        return dates_between(self.start, self.end)

    @property
    def replaced_dates(self) -> list[dt.date]:
        return replaced_dates(self.dates, self.raw_events_by_date, allow_empty=self.allow_empty)

    @property
    def kept_dates(self) -> list[dt.date]:
        """Dates with no raw events whose views the backfill leaves as they are."""
        replaced = set(self.replaced_dates)
        return [d for d in self.dates if d not in replaced]


def replaced_dates(dates: list[dt.date], raw_events_by_date: dict[dt.date, int], *, allow_empty: bool) -> list[dt.date]:
    """The ``dates`` a backfill replaces: those with raw events, or every one with ``allow_empty``.

    Replacing a date without raw events writes nothing in place of its view rows; once retention
    has deleted the raw rows, those rows are the only record left, so only ``allow_empty`` (as
    ``forget --visitor``, whose visitor may have been a date's only one) clears them.
    """
    return list(dates) if allow_empty else [d for d in dates if raw_events_by_date.get(d, 0) > 0]


def date_runs(dates: list[dt.date]) -> list[tuple[dt.date, dt.date]]:
    """``dates`` as runs of consecutive days, (first, last) each, in order.

    A view's dates are replaced by a range predicate, so dates kept inside a chunk split it
    into runs, each replaced on its own.
    """
    runs: list[tuple[dt.date, dt.date]] = []
    for day in sorted(set(dates)):
        if runs and runs[-1][1] + dt.timedelta(days=1) == day:
            runs[-1] = (runs[-1][0], day)
        else:
            runs.append((day, day))
    return runs


def plan(
    spark: SparkSession,
    settings: Settings,
    start: dt.date,
    end: dt.date,
    site_id: str | None,
    *,
    allow_empty: bool = False,
) -> BackfillPlan:
    """What a backfill would read and replace: raw events per date (the ``--dry-run`` report)."""
    if end < start:
        raise BackfillError(f"--to {end} is before --from {start}")
    counts = raw_events(raw_rows(spark, settings, start, end, site_id)).groupBy("event_date").count().collect()
    return BackfillPlan(start, end, site_id, {r["event_date"]: r["count"] for r in counts}, allow_empty)


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
    computed = {
        TRAFFIC_1M: traffic.with_digests(traffic.traffic_minutes_batch(windowed)),
        SESSIONS: sessions.sessions(events, settings.spark.session_gap),
        RATELIMIT: ratelimit.ratelimit_counts(windowed),
        PROPS_1D: props.props_days(windowed),
        VITALS_1H: vitals.with_digests(vitals.vitals_hours(windowed)),
    }
    for spec, (source, roll_up) in ROLL_UPS.items():
        computed[spec] = roll_up(computed[source])
    return {spec: computed[spec] for spec in BACKFILL_VIEWS}


# The views rolled up from another view's frame instead of from the events: (that view, how), each
# after the view it reads.
ROLL_UPS: dict[ViewSpec, tuple[ViewSpec, Callable[[DataFrame], DataFrame]]] = {
    TRAFFIC_1H: (TRAFFIC_1M, lambda minutes: traffic.roll_up(minutes, "hour")),
    TRAFFIC_1D: (TRAFFIC_1H, lambda hours: traffic.roll_up(hours, "day")),
    ACTIVE_5M: (TRAFFIC_1M, traffic.active_visitors),
    EVENTS: (SESSIONS, sessions.visit_events),
    VISITS_1H: (SESSIONS, lambda visits: sessions.visits(visits, "hour")),
    VISITS_1D: (SESSIONS, lambda visits: sessions.visits(visits, "day")),
}


def shared_frames(views: Sequence[ViewSpec], *, runs: int = 1) -> list[ViewSpec]:
    """The frames a backfill of ``views`` reads more than once (written, or rolled up into a view it
    needs, once per run of dates a chunk writes), in ``BACKFILL_VIEWS`` order: those are cached while
    the chunk is written, the others not."""
    needed = set(views)
    for spec in views:
        while spec in ROLL_UPS:
            spec = ROLL_UPS[spec][0]
            needed.add(spec)
    reads = [ROLL_UPS[spec][0] for spec in needed if spec in ROLL_UPS]
    return [spec for spec in BACKFILL_VIEWS if runs * ((spec in views) + reads.count(spec)) > 1]


def _midnight(day: dt.date) -> dt.datetime:
    return dt.datetime.combine(day, dt.time(), dt.UTC)


def backfill(
    spark: SparkSession,
    settings: Settings,
    *,
    start: dt.date,
    end: dt.date,
    site_id: str | None = None,
    allow_empty: bool = False,
    progress: bool = True,
    views: Sequence[ViewSpec] = BACKFILL_VIEWS,
) -> BackfillPlan:
    """Recompute ``views`` (every view by default) for ``start..end``, in chunks of dates
    (``jobs.backfill_chunks``): at most ``spark.backfill_chunk_days`` dates and ``chunk_events`` raw events each.

    Each chunk replaces its dates in each view atomically, so memory stays bounded by a chunk
    whatever the range, and an interrupted backfill leaves every date either old or new. Dates
    without raw events (of ``site_id``, if given) are kept unless ``allow_empty``; the returned
    plan names them. A view left out of ``views`` is not computed unless one named is rolled up
    from it (the hours from the minutes), and is never written; a view's rows are cached only if
    read more than once (``shared_frames``). With no views, a backfill only
    reads and caches each chunk's events: ``bench.backfill --floor`` times that.
    """
    unknown = [spec.table for spec in views if spec not in BACKFILL_VIEWS]
    if unknown:
        raise BackfillError(f"{', '.join(unknown)}: not a view a backfill writes; choose from {_view_names()}")
    if end < start:
        raise BackfillError(f"--to {end} is before --from {start}")
    budget = chunk_events(spark, settings)
    chunks = plan_chunks(settings, start, end, budget)
    log.info("backfill planned", extra=kv(chunks=len(chunks), events_per_chunk=budget, start=str(start), end=str(end)))
    counts: dict[dt.date, int] = {}
    bar = tqdm(total=len(chunks) * len(views), desc="backfill", unit="view", disable=not progress)
    with bar:
        for chunk_start, chunk_end in chunks:
            counts |= _backfill_chunk(spark, settings, chunk_start, chunk_end, site_id, allow_empty, views, bar)
    return BackfillPlan(start, end, site_id, counts, allow_empty)


def _view_names() -> str:
    return ", ".join(spec.table for spec in BACKFILL_VIEWS)


def _backfill_chunk(
    spark: SparkSession,
    settings: Settings,
    start: dt.date,
    end: dt.date,
    site_id: str | None,
    allow_empty: bool,
    views: Sequence[ViewSpec],
    bar: tqdm,  # type: ignore[type-arg]
) -> dict[dt.date, int]:
    """Recompute ``views`` for one chunk of dates; returns the raw events per date it read."""
    # Sessions near the range's edges need their neighbours: a gap before, a day after.
    since = F.lit(_midnight(start)) - F.expr(f"INTERVAL {spark_interval(settings.spark.session_gap)}")
    day = dt.timedelta(days=1)
    reading = time.monotonic()
    rows = raw_rows(spark, settings, start - day, end + day, site_id)
    # The views' map-side aggregates hold a partition's groups in memory, and a scan's partition can
    # be a whole day's file, so the events are cached spread over the raised partitions, by site and
    # minute (what the minute rows group by). They are raised before the cache is declared, since a
    # cache is planned then (the deduplication too).
    with (
        job_settings(spark, rows.count()) as partitions,
        _cached(traffic.by_minute(raw_events(rows, since=since), partitions)) as events,
    ):
        by_date = {r["event_date"]: r["count"] for r in events.groupBy("event_date").count().collect()}
        counts = {d: n for d, n in by_date.items() if start <= d <= end}
        seconds = round(time.monotonic() - reading, 1)
        read = kv(start=str(start), end=str(end), events=sum(counts.values()), partitions=partitions, seconds=seconds)
        log.info("raw events read", extra=read)
        replaced = replaced_dates(dates_between(start, end), counts, allow_empty=allow_empty)
        for kept in sorted(set(dates_between(start, end)) - set(replaced)):
            log.info("no raw events, views kept", extra=kv(date=str(kept), site=site_id))
        if not replaced:
            bar.update(len(views))
            return counts
        computed = compute_views(events, settings, start, end)
        runs = date_runs(replaced)

        stop = threading.Event()  # set by write_each once a write has failed, or on a Ctrl-C

        def write(spec: ViewSpec) -> None:
            bar.set_postfix_str(f"{start}..{end} {spec.table}")
            began = time.monotonic()
            try:
                # The predicate each write replaces covers exactly the dates (of the site) that had raw events.
                for first, last in runs:
                    if stop.is_set():  # each run of dates is replaced whole or not at all
                        raise Stopped(
                            f"{spec.table}: not written from {first} on, as another view failed or the backfill"
                            " was interrupted; run the same backfill again to write it"
                        )
                    replace_dates(computed[spec], spec, settings, start=first, end=last, site_id=site_id)
            except Stopped as e:
                log.warning("view stopped", extra=kv(view=spec.table, start=str(start), end=str(end), reason=str(e)))
                raise
            except Exception as e:
                log.error("view failed", extra=kv(view=spec.table, start=str(start), end=str(end), error=str(e)[:2000]))
                raise
            seconds = round(time.monotonic() - began, 1)
            log.info("view backfilled", extra=kv(view=spec.table, start=str(start), end=str(end), seconds=seconds))
            bar.update()

        with ExitStack() as shared:
            for spec in shared_frames(views, runs=len(runs)):
                shared.enter_context(_cached(computed[spec]))
            # ``spark.backfill_views_at_once`` views at once (``jobs.write_pool``). A view rolled up from a
            # cached view that another write is filling waits for the partitions being filled, and fills
            # the others itself.
            write_each(write_order(views), write, at_once=settings.spark.backfill_views_at_once, stop=stop)
    return counts


def write_order(views: Sequence[ViewSpec]) -> list[ViewSpec]:
    """``views`` in the order a chunk begins them: those computed from the events first, so the
    two heaviest (the minutes and the sessions) run together, then the roll-ups, each after the view
    it reads."""
    from_events = [spec for spec in BACKFILL_VIEWS if spec in views and spec not in ROLL_UPS]
    return from_events + [spec for spec in ROLL_UPS if spec in views]
