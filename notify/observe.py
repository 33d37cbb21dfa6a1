"""What the alert rules look at, read from the tables: hourly page views, the newest event, dead letters.

Page views per hour come from ``agg.traffic_1h`` (the site total), read through the query layer's
table reader; the newest event and the dead letters from the raw tables.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import pandas as pd
import pyarrow.compute as pc

from notify.health import quarantined_of
from query.aggregates import Aggregates, Range
from query.freshness import newest_event, newest_window_end
from tally.settings import AlertRuleSettings, Settings
from tally.storage import find_table, text_is
from tally.tables import RAW_REJECTED, TRAFFIC_1H

HOUR = dt.timedelta(hours=1)


@dataclass(frozen=True)
class SiteFigures:
    """One site's figures for the rules, at ``now``."""

    site: str
    now: dt.datetime
    hour: dt.datetime  # start of the last full hour
    hour_pageviews: int
    hour_history: tuple[int, ...]  # that hour of day on earlier days, oldest first
    now_history: tuple[int, ...]  # the current hour of day on earlier days, oldest first
    newest_event: dt.datetime | None
    newest_window: dt.datetime | None
    quarantined: tuple[str, ...]


@dataclass(frozen=True)
class DeadLetterFigures:
    recent: int  # dead letters received in the last window
    baseline: float  # the average per window over the 24 hours before it


def same_hour_history(hourly: pd.Series, hour: dt.datetime, days: int) -> tuple[int, ...]:
    """Page views of the hour of day of ``hour`` on each of the ``days`` days before it, from the
    site's first hour with data on (missing hours are zeros), oldest first. ``hourly``: page views
    indexed by hour start (UTC)."""
    if hourly.empty:
        return ()
    first = hourly.index.min()
    found = []
    for back in range(days, 0, -1):
        moment = pd.Timestamp(hour - dt.timedelta(days=back))
        if moment >= first:
            found.append(int(hourly.get(moment, 0)))
    return tuple(found)


def site_figures(
    settings: Settings, agg: Aggregates, site: str, now: dt.datetime, rules: AlertRuleSettings
) -> SiteFigures:
    """Read what the rules of one site need."""
    this_hour = now.replace(minute=0, second=0, microsecond=0)
    last_hour = this_hour - HOUR
    days = Range((this_hour - dt.timedelta(days=rules.usual_history_days + 1)).date(), now.date())
    rows = agg.rows(TRAFFIC_1H.table, site, days, ["window_start", "pageviews"], text_is("dimension", "all"))
    hourly = pd.Series(rows["pageviews"].to_numpy(), index=pd.to_datetime(rows["window_start"], utc=True))
    hourly = hourly.groupby(level=0).sum()
    return SiteFigures(
        site=site,
        now=now,
        hour=last_hour,
        hour_pageviews=int(hourly.get(pd.Timestamp(last_hour), 0)),
        hour_history=same_hour_history(hourly, last_hour, rules.usual_history_days),
        now_history=same_hour_history(hourly, this_hour, rules.usual_history_days),
        newest_event=newest_event(agg, site, now.date()),
        newest_window=newest_window_end(agg, site, now.date()),
        quarantined=quarantined_of(settings, site),
    )


def dead_letter_figures(settings: Settings, now: dt.datetime, window_minutes: int) -> DeadLetterFigures:
    """Dead letters (``raw.rejected``, every site) in the last window, and the window's average over the day before."""
    table = find_table(settings, RAW_REJECTED)
    if table is None:
        return DeadLetterFigures(0, 0.0)
    window = dt.timedelta(minutes=window_minutes)
    start = now - window - dt.timedelta(days=1)
    millis = int(start.timestamp() * 1000)
    condition = (pc.field("rejected_date") >= start.date()) & (pc.field("received_at") >= millis)
    received = table.to_pyarrow_dataset().to_table(columns=["received_at"], filter=condition).column("received_at")
    times = received.to_numpy()
    cut = int((now - window).timestamp() * 1000)
    recent = int((times >= cut).sum())
    before = int((times < cut).sum())
    return DeadLetterFigures(recent, before / (dt.timedelta(days=1) / window))
