"""How fresh the figures are: the newest archived event of a site and the newest minute of its views.

The dashboard's data-health panel and live caption, and the alerts of ``notify/``, read these
same functions, so "the views are N minutes behind" means one thing everywhere. Crawlers are
left out, as the views leave them out.
"""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pyarrow.compute as pc

from query.aggregates import Aggregates, Range
from tally.storage import text_is
from tally.tables import RAW_PAGEVIEWS, TRAFFIC_1M


def newest_window_end(agg: Aggregates, site_id: str, today: dt.date) -> dt.datetime | None:
    """The end of the site's newest ``agg.traffic_1m`` window today or yesterday, or None."""
    days = Range(today - dt.timedelta(days=1), today)
    rows = agg.rows(TRAFFIC_1M.table, site_id, days, ["window_end"], text_is("dimension", "all"))
    if rows.empty:
        return None
    newest: dt.datetime = pd.to_datetime(rows["window_end"], utc=True).max().to_pydatetime()
    return newest


def newest_event(agg: Aggregates, site_id: str, today: dt.date) -> dt.datetime | None:
    """The newest archived non-bot event of a site today or yesterday (event time), or None; read from
    the reader's snapshot of raw.pageviews (reloaded when a new version shows up, not per call)."""
    dataset = agg.dataset(RAW_PAGEVIEWS)
    if dataset is None:
        return None
    condition = (
        (pc.field("event_date") >= today - dt.timedelta(days=1))
        & (pc.field("event_date") <= today)
        & text_is("site_id", site_id)
        & ~pc.field("is_bot")
    )
    times = dataset.to_table(columns=["event_time"], filter=condition).column("event_time")
    newest = pc.max(times).as_py() if len(times) else None
    return dt.datetime.fromtimestamp(newest / 1000, dt.UTC) if newest is not None else None


def bot_events(agg: Aggregates, site_id: str, days: Range) -> int:
    """The site's archived events over the range from bots, monitors and automation (``is_bot``):
    kept in raw, left out of every figure; counted exactly from the files of those dates."""
    dataset = agg.dataset(RAW_PAGEVIEWS)
    if dataset is None:
        return 0
    condition = (
        (pc.field("event_date") >= days.start)
        & (pc.field("event_date") <= days.end)
        & text_is("site_id", site_id)
        & pc.field("is_bot")
    )
    return int(dataset.count_rows(filter=condition))


def views_lag(newest_raw: dt.datetime | None, newest_window: dt.datetime | None, today: dt.date) -> dt.timedelta:
    """How far the views' newest minute (None: none since yesterday began) trails the newest
    archived event of today or yesterday; zero when they are level or nothing was archived."""
    if newest_raw is None:
        return dt.timedelta(0)
    since = newest_window or dt.datetime.combine(today - dt.timedelta(days=1), dt.time(), dt.UTC)
    return max(dt.timedelta(0), newest_raw - since)
