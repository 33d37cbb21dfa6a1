"""The time series: page views and visitors per local hour or day, the previous period overlaid, and
the range's annotations; drawn as HTML over an SVG image of its lines (:func:`dashboard.markup.line_chart`)."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping

import pandas as pd
import streamlit as st

from dashboard import markup
from dashboard.markup import Line
from tally.annotations import Annotation


def wall_clock(times: pd.Series, timezone: str) -> pd.Series:
    """Bucket starts as the site's wall-clock times (naive), so the chart's axis reads in its zone
    whatever the browser's zone: Vega-Lite shows a time without an offset as written."""
    times = pd.to_datetime(times)
    if times.dt.tz is None:
        return times
    return times.dt.tz_convert(timezone).dt.tz_localize(None)


SERIES_COLOURS = {
    "Page views": "#1f77b4",
    "Visitors": "#ff7f0e",
    "Page views (previous period)": "#aec7e8",
    "Page views (imported)": "#6a51a3",
    "Visitors (imported)": "#b15928",
}
TIME_TICKS = 7  # labels on the time axis, at most


def time_labels(times: pd.Series, grain: str) -> tuple[list[str], list[int], list[str]]:
    """Each bucket's name (shown on hover), the buckets labelled on the axis (about :data:`TIME_TICKS`,
    evenly spaced) and their labels: ``Sep 06`` by day; ``14:00`` by hour, the date at midnight."""
    stamps = [pd.Timestamp(t) for t in times]
    hourly = grain == "hour"
    names = [f"{t:%a %b %d %H:%M}" if hourly else f"{t:%a %b %d, %Y}" for t in stamps]
    every = max(1, math.ceil(len(stamps) / TIME_TICKS))
    ticks = list(range(0, len(stamps), every))
    labels = [f"{stamps[i]:%b %d}" if not hourly or stamps[i].hour == 0 else f"{stamps[i]:%H:%M}" for i in ticks]
    return names, ticks, labels


def note_positions(times: pd.Series, notes: list[Annotation]) -> list[tuple[float, str]]:
    """Each annotation's place along the time axis (0–1: the first bucket of its day, placed as the
    lines' points are, by bucket, so a day of 23 or 25 hours does not shift it) and its text; a note
    on a day the axis does not reach is left out."""
    stamps = [pd.Timestamp(t) for t in times]
    if len(stamps) < 2:
        return []
    placed = []
    for n in notes:
        day = pd.Timestamp(n.day)
        first = next((i for i, t in enumerate(stamps) if t >= day), None)
        if first is not None and stamps[first] < day + pd.Timedelta(days=1):
            placed.append((first / (len(stamps) - 1), f"{n.day}: {n.text}"))
    return placed


def time_series(
    current: pd.DataFrame,
    previous: pd.DataFrame | None,
    grain: str,
    notes: list[Annotation] | None = None,
    *,
    timezone: str = "UTC",
    imported: Mapping[dt.date, Mapping[str, int]] | None = None,
) -> None:
    """Page views and visitors per bucket (the site's local hours or dates, ``timezone``), the previous
    period overlaid on the same axis, and the range's annotations as dashed rules with their text;
    drawn as HTML and SVG (:func:`dashboard.markup.line_chart`: a Vega chart cost a warm tab about
    0.25 s, docs/DASHBOARD.md), every text escaped. ``imported``: imported history's page views and
    visitors by local date (:mod:`dashboard.imported_history`), drawn as lines of their own."""
    st.subheader(f"Page views and visitors per {grain}")
    times = wall_clock(current["time"], timezone)
    series = {"Page views": current["pageviews"], "Visitors": current["visitors"]}
    if previous is not None and len(previous) == len(current):
        series["Page views (previous period)"] = previous["pageviews"]
    if imported and grain == "day":
        dates = [t.date() for t in times]
        for metric, name in (("pageviews", "Page views (imported)"), ("visitors", "Visitors (imported)")):
            series[name] = pd.Series([imported[d][metric] if d in imported else None for d in dates], dtype="float")
    lines = [
        Line(name, SERIES_COLOURS[name], [None if pd.isna(v) else float(v) for v in values])
        for name, values in series.items()
    ]
    names, ticks, labels = time_labels(times, grain)
    chart = markup.line_chart(
        names,
        lines,
        ticks=ticks,
        tick_labels=labels,
        x_title=f"Time ({timezone})",
        notes=note_positions(times, notes or []),
    )
    st.html(markup.block(chart))
