"""The alert rules, pure: each takes figures already read (and the time) and says whether it fires.

Stated once here and in docs/REPORTS-AND-ALERTS.md:

- ``traffic_threshold``: the last full hour's page views above ``pageviews_per_hour_above`` or
  below ``pageviews_per_hour_below`` (0 = that side off).
- ``traffic_unusual``: the last full hour's page views ``x`` against the same hour of day on the
  previous days (up to ``usual_history_days``, counted from the site's first day with data):
  fires when ``|x - median| > usual_factor * spread``, ``spread = max(MAD, sqrt(median), 1)``
  (MAD: the median absolute deviation; the square root keeps a quiet site's chance swings from
  firing), and only with at least ``usual_min_days`` days of history.
- ``tracking_stopped``: no page view for ``tracking_stopped_minutes`` while that span usually
  holds at least 3 (the median page views of the current hour of day over the history, scaled to
  the span; same history rule as above).
- ``deadletter_surge`` (every site at once: dead letters carry no trusted site): at least
  ``deadletter_min_count`` dead letters in the last ``deadletter_window_minutes`` and at least
  ``deadletter_factor`` times that window's average over the previous 24 hours.
- ``archive_lag`` / ``views_lag``: the lag longer than ``alerts.lag_minutes``.
- ``quarantine``: a partition holding the site's figures is quarantined by ``tally check`` or
  ``tally audit``.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from tally.lag import describe_lag

EVERY_SITE = "*"  # the site of an instance-wide finding
MIN_EXPECTED_SILENT = 3.0  # page views a silent span must usually hold before silence is an alert


@dataclass(frozen=True)
class Finding:
    """One rule's verdict on one site (``*``: the whole instance) now."""

    rule: str
    site: str
    firing: bool
    summary: str = ""  # for people; set when firing


def median_and_mad(values: Sequence[float]) -> tuple[float, float]:
    """The median and the median absolute deviation of ``values`` (not empty)."""
    assert values, "median of no values"
    middle = statistics.median(values)
    return middle, statistics.median(abs(v - middle) for v in values)


def traffic_threshold(site: str, hour: dt.datetime, pageviews: int, *, above: int, below: int) -> Finding:
    """Page views of the hour starting at ``hour`` above ``above`` or below ``below`` (0 = off)."""
    when = f"{hour:%Y-%m-%d %H:00} UTC"
    if above and pageviews > above:
        return Finding("traffic_threshold", site, True, f"{pageviews:,} page views in the hour {when}, above {above:,}")
    if below and pageviews < below:
        return Finding("traffic_threshold", site, True, f"{pageviews:,} page views in the hour {when}, below {below:,}")
    return Finding("traffic_threshold", site, False)


def traffic_unusual(
    site: str, hour: dt.datetime, pageviews: int, history: Sequence[int], *, factor: float, min_days: int
) -> Finding:
    """The hour's page views outside ``median ± factor·spread`` of the same hour on earlier days."""
    if not factor or len(history) < min_days:
        return Finding("traffic_unusual", site, False)
    middle, mad = median_and_mad(history)
    spread = max(mad, math.sqrt(middle), 1.0)
    if abs(pageviews - middle) <= factor * spread:
        return Finding("traffic_unusual", site, False)
    side = "above" if pageviews > middle else "below"
    return Finding(
        "traffic_unusual",
        site,
        True,
        f"{pageviews:,} page views in the hour {hour:%Y-%m-%d %H:00} UTC, far {side} the usual {middle:,.0f}"
        f" (median of the same hour over {len(history)} days; allowed ± {factor * spread:,.0f})",
    )


def tracking_stopped(
    site: str,
    now: dt.datetime,
    newest: dt.datetime | None,
    history: Sequence[int],
    *,
    minutes: int,
    min_days: int,
) -> Finding:
    """No page view for ``minutes`` while the span usually holds at least 3 (``history``: page views of
    the current hour of day on earlier days)."""
    if not minutes or len(history) < min_days:
        return Finding("tracking_stopped", site, False)
    span = dt.timedelta(minutes=minutes)
    if newest is not None and now - newest < span:
        return Finding("tracking_stopped", site, False)
    expected = statistics.median(history) * minutes / 60
    if expected < MIN_EXPECTED_SILENT:
        return Finding("tracking_stopped", site, False)
    since = f"since {newest:%Y-%m-%d %H:%M} UTC" if newest else "today or yesterday"
    return Finding(
        "tracking_stopped",
        site,
        True,
        f"no page view {since}; about {expected:,.0f} are usual in {minutes} minutes at this hour."
        " Is the snippet still on the site, and is ingest running (`tally status`)?",
    )


def deadletter_surge(recent: int, baseline: float, *, window_minutes: int, min_count: int, factor: float) -> Finding:
    """``recent`` dead letters in the window against ``baseline``, the window's average over the previous day."""
    if not min_count or recent < min_count or recent < factor * baseline:
        return Finding("deadletter_surge", EVERY_SITE, False)
    return Finding(
        "deadletter_surge",
        EVERY_SITE,
        True,
        f"{recent:,} dead letters in the last {window_minutes} minutes (usually {baseline:,.1f});"
        " see raw.rejected for their kinds",
    )


def lag(rule: str, site: str, behind: dt.timedelta | None, limit: dt.timedelta, what: str) -> Finding:
    """``rule`` (archive_lag, views_lag) fires when ``behind`` is known and longer than ``limit``."""
    if behind is None or behind <= limit:
        return Finding(rule, site, False)
    return Finding(
        rule,
        site,
        True,
        f"{what} {describe_lag(behind)} behind (limit alerts.lag_minutes = {limit.total_seconds() / 60:.0f});"
        " see `tally status` and the service's log",
    )


def quarantine(site: str, partitions: Sequence[str]) -> Finding:
    """Fires while a partition holding the site's figures is quarantined."""
    if not partitions:
        return Finding("quarantine", site, False)
    return Finding(
        "quarantine",
        site,
        True,
        f"{len(partitions)} quarantined partition(s): {', '.join(partitions[:8])};"
        " see `tally check` / `tally audit`, then `tally backfill` the dates",
    )
