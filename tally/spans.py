"""Time spans of the settings (``spark.watermark``, ``spark.session_gap``): read once, written twice.

The settings hold a span as a :class:`datetime.timedelta`. Spark takes it back as interval text
(``withWatermark``, ``session_window``, ``INTERVAL …``), and people read it in messages.
"""

from __future__ import annotations

import datetime as dt
import re

# Largest first: a span is written in the largest unit that divides it.
UNITS = {"day": 86_400, "hour": 3_600, "minute": 60, "second": 1}
_SPAN = re.compile(r"\s*(\d+)\s*(" + "|".join(UNITS) + r")s?\s*")


def parse_span(text: str) -> dt.timedelta:
    """``"30 minutes"``, ``"1 day"`` as a timedelta; ValueError for anything else."""
    match = _SPAN.fullmatch(text.lower())
    if match is None:
        raise ValueError(f"{text!r} is not a time span like '30 minutes' (seconds, minutes, hours or days)")
    return dt.timedelta(seconds=int(match[1]) * UNITS[match[2]])


def _amount_and_unit(span: dt.timedelta) -> tuple[int, str]:
    assert span >= dt.timedelta(0) and span % dt.timedelta(seconds=1) == dt.timedelta(0), (
        f"time spans are whole seconds, not negative; got {span!r}"
    )
    seconds = int(span.total_seconds())
    for unit, size in UNITS.items():
        if seconds % size == 0:
            return seconds // size, unit
    raise AssertionError("unreachable: the units include seconds")


def spark_interval(span: dt.timedelta) -> str:
    """Spark's interval text for a span: ``"30 minutes"``, ``"1 day"``."""
    amount, unit = _amount_and_unit(span)
    return f"{amount} {unit}" + ("" if amount == 1 else "s")


def describe_span(span: dt.timedelta) -> str:
    """A span for people: ``"10 minutes"``, ``"1,500 seconds"`` (as configured, not ``0:10:00``)."""
    amount, unit = _amount_and_unit(span)
    return f"{amount:,} {unit}" + ("" if amount == 1 else "s")
