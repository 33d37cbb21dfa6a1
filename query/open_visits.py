"""Visits still open: counted from their first event, before the views write them.

The views write a visit (``agg.sessions``, its events to ``agg.events``, its counts to
``agg.visits_*``) once it has closed: when the stream's watermark has passed its last event by the
session gap (30 + 10 minutes by default; longer when no event arrives to move the watermark on).
Until then the visit lives in the streaming job's state only, and its events are in
``raw.pageviews`` (beacon → raw about 2 s) but not in ``agg.events``. This module reads them there:
the site's recent raw events that ``agg.events`` does not hold yet are the events of its open
visits, sessionised by the views' rule (:func:`query.raw_events.visits_sql`).

Which recent events: those of the ``span`` of :func:`tail_of` before the site's newest archived
event (the watermark, the gap, two session triggers and ``spark.open_visit_lookback``). The stream
closes a visit once its watermark, which trails the newest event it has seen by the watermark's
delay, has passed the visit's last event by the gap; the stream has seen at least the newest minute
it counted for the site in ``agg.traffic_1m``. So a visit whose last event is older than that
minute less ``closes`` (all but the lookback) has closed, and its events, if ``agg.events`` lacks
them, were dropped as late (a backfill counts them). The span holds
the whole of every open visit that has lasted up to ``spark.open_visit_lookback``; a longer one
shows only its events of that span until it closes. A visit that mixes events already in
``agg.events`` with ones that are not is not open either: its new events arrived after it closed.
No visit is counted twice. The span is anchored at the site's newest event, not the clock, so
visits stay shown while the stream's watermark waits for traffic to move it on.

The rows have ``agg.sessions``' shape (one per visit: start, bounce, duration, page views, entry and
exit page, the first event's attributes), so the reports add them to the closed visits the views
count. Their bounce, duration and exit page are provisional: they change as the visit goes on.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from query.aggregates import SESSION_COLUMNS, Range
from query.raw_events import VISIT_ATTRIBUTES, open_events, visits_sql
from tally.dimensions import AUDIENCE_DIMENSIONS
from tally.settings import Settings
from tally.storage import text_is

COLUMNS = SESSION_COLUMNS
# The raw columns a visit is made of: its key, its events' kinds and pages, its first event's attributes.
_READ = "visitor_id, event_time, event_id, type, path, " + ", ".join(VISIT_ATTRIBUTES)


@dataclass(frozen=True)
class Tail:
    """Where a site's open visits are looked for, before its newest event: a visit whose last event
    is more than ``closes`` before it has closed (the watermark, the gap and two session triggers:
    the views wrote it, or dropped its events as late), and its events are read over ``span``
    (``closes`` and ``spark.open_visit_lookback`` more, for a visit that has gone on a while)."""

    closes: dt.timedelta
    span: dt.timedelta
    gap_ms: int


def tail_of(settings: Settings) -> Tail:
    """The tail the views' settings give."""
    spark = settings.spark
    closes = spark.watermark + spark.session_gap + 2 * dt.timedelta(seconds=spark.sessions_trigger_seconds)
    return Tail(closes, closes + spark.open_visit_lookback, spark.session_gap // dt.timedelta(milliseconds=1))


def empty() -> pd.DataFrame:
    """No open visits."""
    return pd.DataFrame(columns=COLUMNS)


def newest_date(raw: ds.Dataset, site_id: str) -> dt.date | None:
    """The newest date partition of ``raw`` with files that can hold the site's events (by the
    files' statistics, read from the table's log: no file is opened), or None."""
    dates = [
        ds.get_partition_keys(f.partition_expression).get("event_date")
        for f in raw.get_fragments(filter=ds.field("site_id") == site_id)
    ]
    known = [d if isinstance(d, dt.date) else dt.date.fromisoformat(str(d)) for d in dates if d is not None]
    return max(known, default=None)


@dataclass(frozen=True)
class Tables:
    """The table snapshots open visits are read from."""

    raw: ds.Dataset  # raw.pageviews
    events: ds.Dataset | None  # agg.events (None before it exists): the closed visits' events
    minutes: ds.Dataset | None  # agg.traffic_1m (None before it exists): how far the stream has come


def open_visits(tables: Tables, site_id: str, tail: Tail) -> pd.DataFrame:
    """The site's open visits (:data:`COLUMNS`, ``session_start`` an aware UTC timestamp): its raw
    events of the ``tail`` before its newest one that ``agg.events`` does not hold, sessionised with the
    tail's gap, but for those the stream has closed (:func:`_read_open`)."""
    query = f"""
        SELECT v.started AS session_start, v.pageviews = 1 AS bounce, v.duration_ms, v.pageviews,
               v.entry_page, v.exit_page, {", ".join(f"v.{a}" for a in AUDIENCE_DIMENSIONS)}
        FROM visits v SEMI JOIN open_keys k ON v.visitor_id = k.visitor_id AND v.visit = k.visit
        ORDER BY v.started, v.visitor_id
    """
    frame = _read_open(tables, site_id, tail, query)
    if frame is None:
        return empty()
    frame["session_start"] = pd.to_datetime(frame["session_start"], unit="ms", utc=True)
    frame["bounce"] = frame["bounce"].astype(bool)
    return frame[COLUMNS]


def open_event_ids(tables: Tables, site_id: str, tail: Tail) -> set[str]:
    """The ids of the events of the site's open visits (:func:`open_visits`): archived, and in a
    visit the views will write when it closes (the audit's work in flight)."""
    query = (
        "SELECT n.event_id FROM numbered n SEMI JOIN open_keys k ON n.visitor_id = k.visitor_id AND n.visit = k.visit"
    )
    frame = _read_open(tables, site_id, tail, query)
    return set() if frame is None else set(frame["event_id"].astype(str))


def _read_open(tables: Tables, site_id: str, tail: Tail, query: str) -> pd.DataFrame | None:
    """``query`` over the site's sessionised tail (``numbered`` and ``visits``, as
    :func:`query.raw_events.visits_sql` makes them) and ``open_keys`` (visitor, visit: the open
    ones); None when the site has no events.

    Not open: a visit with an event ``agg.events`` holds, and one whose last event is older than
    ``tail.closes`` before the newest minute the stream has counted for the site (``agg.traffic_1m``):
    the stream's watermark has passed it, so the views closed it, and its events were dropped as late.
    Before the stream has counted any minute of the site's last dates, none is closed that way."""
    last_day = newest_date(tables.raw, site_id)
    if last_day is None:
        return None
    first_day = last_day - dt.timedelta(days=tail.span.days + 1)
    reached = _stream_reached(tables.minutes, site_id, first_day, last_day)
    con = open_events(tables.raw, site_id, Range(first_day, last_day), _READ)
    try:
        newest = con.execute("SELECT max(event_time) FROM ev").fetchone()
        if newest is None or newest[0] is None:
            return None
        since = int(newest[0]) - tail.span // dt.timedelta(milliseconds=1)
        closed_before = reached - tail.closes // dt.timedelta(milliseconds=1) if reached is not None else since
        con.execute(f"CREATE TEMP TABLE tail AS SELECT * FROM ev WHERE event_time >= {since}")
        con.register("closed_ids", _closed_ids(tables.events, site_id, since))
        con.execute(
            "CREATE TEMP TABLE marked AS SELECT t.*, c.event_id IS NOT NULL AS closed "
            "FROM tail t LEFT JOIN (SELECT DISTINCT event_id FROM closed_ids) c USING (event_id)"
        )
        # Only the visitors with an event no closed visit holds; their closed events come along, so
        # a late event that falls inside a closed visit makes no visit of its own.
        con.execute(
            "CREATE TEMP TABLE candidates AS SELECT * FROM marked WHERE visitor_id IN "
            "(SELECT visitor_id FROM marked WHERE NOT closed)"
        )
        con.execute(visits_sql("candidates", tail.gap_ms))
        # Open: no event of it closed, and its last event recent enough that the views cannot have
        # closed it (an older one's events were dropped as late, and a backfill counts them).
        con.execute(
            "CREATE TEMP TABLE open_keys AS SELECT visitor_id, visit FROM visits ANTI JOIN "
            "(SELECT DISTINCT visitor_id, visit FROM numbered WHERE closed) c USING (visitor_id, visit) "
            f"WHERE started + duration_ms >= {closed_before}"
        )
        return con.execute(query).df()
    finally:
        con.close()


def _stream_reached(minutes: ds.Dataset | None, site_id: str, first: dt.date, last: dt.date) -> int | None:
    """The least event time (ms) the stream has seen for the site: the start of the newest minute of
    ``agg.traffic_1m`` it has counted over the dates; None when it has counted none."""
    if minutes is None:
        return None
    condition = (
        (pc.field("event_date") >= first)
        & (pc.field("event_date") <= last)
        & text_is("site_id", site_id)
        & text_is("dimension", "all")
    )
    starts = minutes.to_table(columns=["window_start"], filter=condition).column("window_start")
    newest = pc.max(starts).as_py() if len(starts) else None
    return int(newest.timestamp() * 1000) if newest is not None else None


def _closed_ids(events: ds.Dataset | None, site_id: str, since: int) -> pa.Table:
    """The ids of ``agg.events``' events since ``since`` (ms), from visits that started on the day
    before it or later (partitions pruned by the visit's start date)."""
    if events is None:
        return pa.table({"event_id": pa.array([], pa.string())})
    start = dt.datetime.fromtimestamp(since / 1000, dt.UTC)
    condition = (
        (pc.field("event_date") >= start.date() - dt.timedelta(days=1))
        & text_is("site_id", site_id)
        & (pc.field("event_ts") >= pa.scalar(start, pa.timestamp("us", tz="UTC")))
    )
    return events.to_table(columns=["event_id"], filter=condition)
