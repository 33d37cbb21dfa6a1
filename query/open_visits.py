"""Visits still open: counted from their first event, before the views write them.

The views write a visit (``agg.sessions``, its events to ``agg.events``, its counts to
``agg.visits_*``) once it has closed: when the stream's watermark has passed its last event by the
session gap (30 + 10 minutes by default; longer when no event arrives to move the watermark on).
Until then the visit lives in the streaming job's state only, and its events are in
``raw.pageviews`` (beacon → raw about 2 s) but not in ``agg.events``. This module reads them there:
the site's recent raw events that ``agg.events`` does not hold yet are the events of its open
visits, sessionised by the views' rule (:func:`query.raw_events.visits_sql`).

Which recent events: those since the site's newest archived event less :func:`tail_span` (the
watermark, the gap, two session triggers and ``spark.open_visit_lookback``). Every open visit's last
event is newer than the watermark less the gap, and the watermark trails the newest event the
stream has seen, which is at least the site's newest, so the span holds the whole of every open
visit that lasted up to ``spark.open_visit_lookback``; a longer one shows only its events of that span
until it closes. A visit that mixes events already in ``agg.events`` with ones that are not is
not open: its new events arrived after it closed (late events, repaired by a backfill) and are
left out here, so no visit is counted twice.

The rows have ``agg.sessions``' shape (one per visit: start, bounce, duration, page views, entry and
exit page, the first event's attributes), so the reports add them to the closed visits the views
count. Their bounce, duration and exit page are provisional: they change as the visit goes on.
"""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from query.aggregates import SESSION_COLUMNS, Range
from query.raw_events import open_events, visits_sql
from tally.dimensions import AUDIENCE_DIMENSIONS
from tally.settings import Settings

COLUMNS = SESSION_COLUMNS
# The raw columns a visit is made of: its key, its events' kinds and pages, its first event's attributes.
_READ = "visitor_id, event_time, event_id, type, path, " + ", ".join(
    dict.fromkeys((*AUDIENCE_DIMENSIONS, "referrer", "utm_source", "utm_medium", "utm_content", "utm_term"))
)


def tail_span(settings: Settings) -> dt.timedelta:
    """How far before the site's newest event the events of its open visits are looked for."""
    spark = settings.spark
    triggers = 2 * dt.timedelta(seconds=spark.sessions_trigger_seconds)
    return spark.watermark + spark.session_gap + triggers + spark.open_visit_lookback


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


def open_visits(
    raw: ds.Dataset, events: ds.Dataset | None, site_id: str, *, span: dt.timedelta, gap_ms: int
) -> pd.DataFrame:
    """The site's open visits (:data:`COLUMNS`, ``session_start`` an aware UTC timestamp): its raw
    events of the ``span`` before its newest one that ``events`` (``agg.events``; None before it
    exists) does not hold, sessionised with ``gap_ms``."""
    last_day = newest_date(raw, site_id)
    if last_day is None:
        return empty()
    first_day = last_day - dt.timedelta(days=span.days + 1)
    con = open_events(raw, site_id, Range(first_day, last_day), _READ)
    try:
        newest = con.execute("SELECT max(event_time) FROM ev").fetchone()
        if newest is None or newest[0] is None:
            return empty()
        since = int(newest[0]) - span // dt.timedelta(milliseconds=1)
        con.execute(f"CREATE TEMP TABLE tail AS SELECT * FROM ev WHERE event_time >= {since}")
        closed = _closed_ids(events, site_id, since)
        con.register("closed_ids", closed)
        con.execute(
            "CREATE TEMP TABLE marked AS SELECT t.*, c.event_id IS NOT NULL AS closed "
            "FROM tail t LEFT JOIN (SELECT DISTINCT event_id FROM closed_ids) c USING (event_id)"
        )
        # Only the visitors with an event no closed visit holds; their closed events come along, so
        # a late event that falls inside a closed visit makes no visit of its own.
        con.execute(
            "CREATE TEMP TABLE candidates AS SELECT * EXCLUDE (closed), closed FROM marked WHERE visitor_id IN "
            "(SELECT visitor_id FROM marked WHERE NOT closed)"
        )
        con.execute(visits_sql("candidates", gap_ms))
        frame = con.execute(
            f"""
            SELECT v.started AS session_start, v.pageviews = 1 AS bounce, v.duration_ms, v.pageviews,
                   v.entry_page, v.exit_page, {", ".join(f"v.{a}" for a in AUDIENCE_DIMENSIONS)}
            FROM visits v ANTI JOIN (
                SELECT DISTINCT visitor_id, visit FROM numbered WHERE closed
            ) c ON v.visitor_id = c.visitor_id AND v.visit = c.visit
            ORDER BY v.started, v.visitor_id
            """
        ).df()
    finally:
        con.close()
    frame["session_start"] = pd.to_datetime(frame["session_start"], unit="ms", utc=True)
    frame["bounce"] = frame["bounce"].astype(bool)
    return frame[COLUMNS]


def _closed_ids(events: ds.Dataset | None, site_id: str, since: int) -> pa.Table:
    """The ids of ``agg.events``' events since ``since`` (ms), from visits that started on the day
    before it or later (partitions pruned by the visit's start date)."""
    if events is None:
        return pa.table({"event_id": pa.array([], pa.string())})
    start = dt.datetime.fromtimestamp(since / 1000, dt.UTC)
    condition = (
        (pc.field("event_date") >= start.date() - dt.timedelta(days=1))
        & (pc.field("site_id") == site_id)
        & (pc.field("event_ts") >= pa.scalar(start, pa.timestamp("us", tz="UTC")))
    )
    return events.to_table(columns=["event_id"], filter=condition)
