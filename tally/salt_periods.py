"""Salt periods: how long a site's visitor ids stay the same, and what "visitors" then means.

A visitor id is ``HMAC(salt, site|IP|UA)``; the salt of a period is deleted when the period ends,
so ids cannot be linked across periods. A site chooses its period (``sites[].salt_period``):

- ``day`` (the default, as Plausible): the shortest link, so the most private. Over a range of
  several days, "visitors" are visitor-days: someone who came on 3 days counts 3 times.
- ``week`` (ISO weeks, Monday to Sunday, UTC) or ``month`` (calendar months, UTC): within one
  period unique visitors are true unique visitors; over a range that spans periods they are
  visitor-weeks or visitor-months. The price: one id links a person's visits for up to a week
  or a month (still never across periods, and never to the IP, which is not kept).
"""

from __future__ import annotations

import datetime as dt
from typing import Literal, get_args

SaltPeriod = Literal["day", "week", "month"]
SALT_PERIODS: tuple[str, ...] = get_args(SaltPeriod)


def period_key(day: dt.date, period: str) -> str:
    """The name of the salt of the period containing ``day``: ``2026-11-25``, ``week-2026-W48``,
    ``month-2026-11``. Names of one kind sort in time order (day names are bare, as before periods)."""
    if period == "week":
        year, week, _ = day.isocalendar()
        return f"week-{year}-W{week:02d}"
    if period == "month":
        return f"month-{day.year}-{day.month:02d}"
    assert period == "day", f"not a salt period: {period!r}"
    return day.isoformat()


def same_kind(key: str, other: str) -> bool:
    """Whether two salt names belong to the same kind of period (day, week or month)."""
    return _kind(key) == _kind(other)


def _kind(key: str) -> str:
    return key.partition("-")[0] if key.startswith(("week-", "month-")) else "day"


def period_of(day: dt.date, period: str) -> tuple[dt.date, dt.date]:
    """The first and last day of the period containing ``day``."""
    if period == "week":
        monday = day - dt.timedelta(days=day.weekday())
        return monday, monday + dt.timedelta(days=6)
    if period == "month":
        first = day.replace(day=1)
        following = (first + dt.timedelta(days=32)).replace(day=1)
        return first, following - dt.timedelta(days=1)
    return day, day


def visitors_meaning(period: str, start: dt.date, end: dt.date) -> str:
    """What "visitors" counts over ``start``..``end`` for a site with this salt period, in plain words."""
    unit = {"day": "day", "week": "week (Monday to Sunday, UTC)", "month": "calendar month (UTC)"}[period]
    ids = {"day": "daily", "week": "weekly", "month": "monthly"}[period]
    if period_of(start, period) == period_of(end, period):
        return f"unique visitors: {ids} visitor ids, and the range lies within one {unit.split(' (')[0]}"
    prep = "on" if period == "day" else "in"
    return (
        f"{ids} visitor ids: a visitor's id changes every {unit}, so someone who came {prep} 3 different "
        f"{unit.split(' (')[0]}s of the range counts 3 times"
    )
