"""Report periods: the last complete week or month before a day, and the period it is compared with."""

from __future__ import annotations

import datetime as dt

from query.aggregates import Range


def due_period(period: str, today: dt.date) -> Range:
    """The newest complete period before ``today`` (the site's local dates): Monday to Sunday, or a calendar month."""
    assert period in ("weekly", "monthly"), f"a report period is weekly or monthly, got {period!r}"
    if period == "weekly":
        end = today - dt.timedelta(days=today.weekday() + 1)  # last Sunday
        return Range(end - dt.timedelta(days=6), end)
    end = today.replace(day=1) - dt.timedelta(days=1)
    return Range(end.replace(day=1), end)


def previous_period(days: Range) -> Range:
    """The range of the same length just before ``days``: the dashboard's comparison (``View.previous``)."""
    return Range(days.start - dt.timedelta(days=days.days), days.start - dt.timedelta(days=1))
