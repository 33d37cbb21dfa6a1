"""The standard reports of a site whose days are counted in a time zone other than UTC, from the views.

The views are kept in UTC. A range of the site's local days (:class:`query.site_time.LocalDays`) is
put together from the rows that fall inside its UTC instants (:func:`query.site_time.split`):

- whole UTC days inside the range from ``agg.traffic_1d`` / ``agg.visits_1d``, whole UTC hours
  around them from ``agg.traffic_1h`` / ``agg.visits_1h``;
- at an edge on a half or quarter hour (Asia/Kolkata, Asia/Kathmandu), the partial hour's page
  views, events, visitors and percentiles from ``agg.traffic_1m``, and its visits from
  ``agg.sessions`` (one row per visit with its start: a visit is counted in the local day it
  started, as the visit views count it in the UTC hour it started).

Counts are added and sketches and digests merged, as for UTC days, so every figure means what it
means for a UTC site. Time series bucket by the site's local date or hour (an hour a bucket edge
cuts is read as minutes). Core Web Vitals are kept per UTC hour only: :class:`ZonedVitals` answers
ranges whose edges fall on whole hours; others are answered exactly from raw events
(:meth:`query.sources.Sources.aggregate_vitals`). Custom properties are kept per UTC day only
(``agg.props_1d``), so a zoned site's are answered exactly from raw events.
"""

from __future__ import annotations

import datetime as dt
import functools
import operator
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
import pyarrow.compute as pc

from query.aggregates import (
    SESSION_COLUMNS,
    VISIT_COLUMNS,
    Aggregates,
    OpenVisits,
    Range,
    Totals,
    property_keys,
    top_of,
    top_visits_of,
    totals_of,
    visit_rows_of,
)
from query.goals import Step
from query.raw import RawQuery
from query.site_time import Interval, LocalDays, Pieces, bucket, buckets, series_pieces, split, utc_dates
from query.vitals import VitalFigures, figures_from_rows
from tally.dimensions import ALL, VISIT_DIMENSIONS
from tally.sketches import Estimate, union_estimate
from tally.storage import text_is
from tally.tables import SESSIONS, TRAFFIC_BY_GRAIN, VISITS_BY_GRAIN, VITALS_1H
from tally.vitals import BANDS, MEASURED_COLUMN, SCROLL_COUNT_COLUMN, SCROLL_SUM_COLUMN, VITALS


def _within(interval: Interval, column: str = "window_start") -> pc.Expression:
    start, end = (pd.Timestamp(t) for t in interval)
    return (pc.field(column) >= start) & (pc.field(column) < end)


def _spanning(intervals: tuple[Interval, ...], column: str = "window_start") -> tuple[Range, pc.Expression]:
    """The dates to read and the condition keeping rows inside any of ``intervals``: one read of a
    table for every piece of a grain, its date partitions narrowed to the dates the pieces touch."""
    dates = sorted({d for interval in intervals for d in _dates_of(interval)})
    inside = functools.reduce(operator.or_, (_within(i, column) for i in intervals))
    return Range(dates[0], dates[-1]), pc.field("event_date").isin(dates) & inside


def _dates_of(interval: Interval) -> list[dt.date]:
    first, last = utc_dates(interval)
    return [first + dt.timedelta(days=i) for i in range((last - first).days + 1)]


@dataclass(frozen=True)
class ZonedReport:
    """The standard panels of one site over local days, from the views (same methods as
    :class:`query.aggregates.AggregateReport`). ``raw`` opens the raw events that answer custom
    properties, when asked (it returns None before any are archived)."""

    agg: Aggregates
    site_id: str
    days: LocalDays
    raw: Callable[[], RawQuery | None] | None = None
    open: OpenVisits = None  # visits still open, which the views have not written yet (query.open_visits)
    exact = False

    def _pieces(self, *, series_grain: str | None = None) -> Pieces:
        return series_pieces(self.days, series_grain) if series_grain else split(self.days.instants)

    def traffic(self, dimension: str, *, series_grain: str | None = None, value: str | None = None) -> pd.DataFrame:
        """``agg.traffic_*`` rows of one dimension whose windows make up the range (days, hours, minutes)."""
        pieces = self._pieces(series_grain=series_grain)
        where = text_is("dimension", dimension)
        if value is not None:
            where = where & text_is("value", value)
        frames = []
        if pieces.days is not None:
            frames.append(self._read(TRAFFIC_BY_GRAIN["day"].table, dimension, Range(*pieces.days), where))
        for grain, intervals in (("hour", pieces.hours), ("minute", pieces.minutes)):
            if intervals:
                days, inside = _spanning(intervals)
                frames.append(self._read(TRAFFIC_BY_GRAIN[grain].table, dimension, days, where & inside))
        return _concat(frames, self._traffic_columns(dimension))

    def visits(self, dimension: str, *, series_grain: str | None = None) -> pd.DataFrame:
        """Visit rows (``agg.visits_*``, and ``agg.sessions`` for the minutes at sub-hour edges) of one dimension."""
        pieces = self._pieces(series_grain=series_grain)
        where = text_is("dimension", dimension)
        frames = []
        if pieces.days is not None:
            frames.append(
                self.agg.rows(VISITS_BY_GRAIN["day"].table, self.site_id, Range(*pieces.days), VISIT_COLUMNS, where)
            )
        if pieces.hours:
            days, inside = _spanning(pieces.hours)
            frames.append(
                self.agg.rows(VISITS_BY_GRAIN["hour"].table, self.site_id, days, VISIT_COLUMNS, where & inside)
            )
        if pieces.minutes:
            frames.append(self._visits_started(dimension, pieces.minutes))
        frames.append(visit_rows_of(self.open_visits(), dimension))  # each at its own start, bucketed as it falls
        return _concat(frames, VISIT_COLUMNS)

    def _visits_started(self, dimension: str, intervals: tuple[Interval, ...]) -> pd.DataFrame:
        """Visits that started in any of ``intervals``, from ``agg.sessions``, shaped as visit-view rows."""
        column = VISIT_DIMENSIONS.get(dimension)
        columns = ["session_start", "bounce", "duration_ms", "pageviews", *([column] if column else [])]
        days, inside = _spanning(intervals, "session_start")
        return visit_rows_of(self.agg.rows(SESSIONS.table, self.site_id, days, columns, inside), dimension)

    def open_visits(self) -> pd.DataFrame:
        """The site's open visits that started in the local days (``agg.sessions``' shape)."""
        rows = self.open() if self.open is not None else pd.DataFrame(columns=SESSION_COLUMNS)
        if rows.empty:
            return rows
        first, last = (pd.Timestamp(t) for t in self.days.instants)
        return rows[(rows["session_start"] >= first) & (rows["session_start"] < last)]

    def _read(self, table: str, dimension: str, days: Range, where: pc.Expression) -> pd.DataFrame:
        return self.agg.rows(table, self.site_id, days, self._traffic_columns(dimension), where)

    @staticmethod
    def _traffic_columns(dimension: str) -> list[str]:
        columns = ["window_start", "value", "pageviews", "events", "visitors_sketch"]
        return columns + (["engagement_ms_digest", "load_ms_digest"] if dimension == ALL else [])

    def totals(self) -> Totals:
        return totals_of(self.traffic(ALL), self.visits(ALL), open_visits=len(self.open_visits()))

    def series(self, grain: str) -> pd.DataFrame:
        """Page views, ≈ visitors (with each bucket's 95% bound) and visits per local hour or day;
        ``time`` is the bucket's start, aware in the site's zone (every bucket present)."""
        grain = "hour" if grain == "hour" else "day"
        traffic, visits = self.traffic(ALL, series_grain=grain), self.visits(ALL, series_grain=grain)
        tz = self.days.timezone
        traffic["bucket"] = [bucket(t, grain, tz) for t in pd.to_datetime(traffic["window_start"], utc=True)]
        visits["bucket"] = [bucket(t, grain, tz) for t in pd.to_datetime(visits["window_start"], utc=True)]
        views = traffic.groupby("bucket")["pageviews"].sum()
        sketches = traffic.groupby("bucket")["visitors_sketch"].agg(list)
        estimates = {b: union_estimate(s) for b, s in sketches.items()}
        counted = visits.groupby("bucket")["visits"].sum()
        rows = []
        for start in buckets(self.days, grain):
            estimate = estimates.get(start)
            rows.append(
                {
                    "time": pd.Timestamp(start).tz_localize(tz, ambiguous=True, nonexistent="shift_forward"),
                    "pageviews": int(views.get(start, 0)),
                    "visitors": round(estimate.value) if estimate else 0.0,
                    "visitors_bound": estimate.relative_error if estimate else 0.0,
                    "visits": int(counted.get(start, 0)),
                }
            )
        return pd.DataFrame(rows, columns=["time", "pageviews", "visitors", "visitors_bound", "visits"])

    def top(self, dimension: str, limit: int = 10) -> pd.DataFrame:
        return top_of(self.traffic(dimension), dimension, limit)

    def top_visits(self, dimension: str, limit: int = 10) -> pd.DataFrame:
        return top_visits_of(self.visits(dimension), limit)

    def goal(self, step: Step) -> Estimate:
        """≈ visitors who viewed a page or sent a custom event in the local days."""
        rows = self.traffic("page" if step.kind == "page" else "event", value=step.value)
        return union_estimate(rows["visitors_sketch"])

    def props(self, key: str, limit: int = 10, name: str | None = None) -> pd.DataFrame:
        """A property's values, exactly from raw events (``agg.props_1d`` holds UTC days only)."""
        raw = self.raw() if self.raw is not None else None
        if raw is None:
            return pd.DataFrame(columns=["value", "events", "visitors", "visitors_bound"])
        return raw.props(key, limit, name)

    def property_keys(self) -> pd.DataFrame:
        """The property keys to pick from: those of the UTC days the local days touch (a list of choices, no figure)."""
        return property_keys(self.agg, self.site_id, Range(*self.days.utc_dates))


@dataclass(frozen=True)
class ZonedVitals:
    """Core Web Vitals of local days whose edges fall on whole UTC hours, from ``agg.vitals_1h``."""

    agg: Aggregates
    site_id: str
    days: LocalDays
    exact = False

    def vitals(self, dimension: str) -> list[VitalFigures]:
        """Figures of ``dimension`` (``all``, ``page`` or ``device``), one per value measured, by value."""
        assert self.days.hour_aligned, f"{self.days.timezone}'s days do not begin on whole UTC hours"
        columns = ["value", MEASURED_COLUMN, SCROLL_SUM_COLUMN, SCROLL_COUNT_COLUMN]
        for v in VITALS:
            columns += [v.digest_column, *(v.band_column(b) for b in BANDS)]
        where = text_is("dimension", dimension) & _within(self.days.instants)
        rows = self.agg.rows(VITALS_1H.table, self.site_id, Range(*self.days.utc_dates), columns, where)
        return figures_from_rows(rows)


def _concat(frames: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    kept = [f for f in frames if not f.empty]
    return pd.concat(kept, ignore_index=True) if kept else pd.DataFrame(columns=columns)
