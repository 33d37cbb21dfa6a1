"""The standard panels' reads: aggregate tables only (agg.*), with delta-rs, merged sketches.

Every figure is either exact (counts that add up across windows) or a merged sketch: unique
visitors are an HLL union over the chosen windows (never a sum of distinct counts), and
percentiles come from merged t-digests (never averaged). Raw events are read only for
drill-downs (:mod:`query.raw`).
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar, cast

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from query.goals import Step
from tally.dimensions import ALL, AUDIENCE_DIMENSIONS, NONE_VALUE, VISIT_DIMENSIONS
from tally.props import MAX_KEYS_PER_DAY, MAX_VALUES_PER_KEY, OTHER_VALUE
from tally.settings import Settings
from tally.sketches import Estimate, digest_quantiles, merge_digests, union_estimate
from tally.storage import arrow_dataset, open_table, text_is
from tally.tables import ACTIVE_5M, PROPS_1D, TRAFFIC_1D, TRAFFIC_BY_GRAIN, VISITS_1D, VISITS_BY_GRAIN

T = TypeVar("T")
QUANTILES = (0.5, 0.9, 0.99)
REFRESH_SECONDS = 5.0  # how stale a table snapshot may get before the next read reloads it
# Daily tables are small (one row per site, day, dimension and value): each table version is read
# once into memory, so a panel filters an Arrow table instead of opening every Parquet file again.
IN_MEMORY = frozenset({TRAFFIC_1D.table, VISITS_1D.table})


@dataclass(frozen=True)
class Range:
    """An inclusive range of UTC dates."""

    start: dt.date
    end: dt.date

    @property
    def days(self) -> int:
        return (self.end - self.start).days + 1


@dataclass(frozen=True)
class Totals:
    """The KPI figures of one site over one range."""

    pageviews: int
    events: int
    visitors: Estimate
    visits: int
    bounces: int
    duration_ms: int
    visit_pageviews: int
    engagement_ms: tuple[float, ...] | None  # p50, p90, p99 from merged t-digests; None = no data
    load_ms: tuple[float, ...] | None
    # Of ``visits``, those still open (query.open_visits): their bounce, duration and page views may change.
    open_visits: int = 0

    @property
    def bounce_rate(self) -> float | None:
        return self.bounces / self.visits if self.visits else None

    @property
    def avg_duration_s(self) -> float | None:
        return self.duration_ms / self.visits / 1000 if self.visits else None

    @property
    def views_per_visit(self) -> float | None:
        return self.visit_pageviews / self.visits if self.visits else None


class Aggregates:
    """Reads of the agg.* tables, with table snapshots shared between page runs and refreshed
    every few seconds (delta-rs loads only the new log entries)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._tables: dict[str, tuple[DeltaTable, ds.Dataset, float, int]] = {}  # table, snapshot, read at, version
        self._memory: dict[str, tuple[int, pa.Table]] = {}
        self._lock = threading.Lock()  # guards _locks and _kept
        self._locks: dict[str, threading.Lock] = {}  # one per table: tables load side by side
        self._kept: dict[tuple[str, ...], tuple[tuple[int | None, ...], object]] = {}  # guarded by _lock

    def _table_lock(self, name: str) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(name, threading.Lock())

    def dataset(self, name: str) -> ds.Dataset | None:
        """The table's current snapshot as an Arrow dataset (rebuilt only when a new version shows up)."""
        found = self.snapshot(name)
        return found[1] if found is not None else None

    def version(self, name: str) -> int | None:
        """The version of the table's current snapshot (refreshed as :meth:`dataset`), or None before it exists."""
        found = self.snapshot(name)
        return found[0] if found is not None else None

    def snapshot(self, name: str) -> tuple[int, ds.Dataset] | None:
        """The table's current version and its snapshot as an Arrow dataset, read together; None before it exists."""
        with self._table_lock(name):
            cached = self._tables.get(name)
            if cached is not None and time.monotonic() - cached[2] <= REFRESH_SECONDS:
                return cached[3], cached[1]
            try:
                if cached is None:
                    table = open_table(self.settings, name)
                else:
                    table = cached[0]
                    table.update_incremental()
                    if table.version() == cached[3]:  # unchanged: keep the dataset (its file list is costly)
                        self._tables[name] = (table, cached[1], time.monotonic(), cached[3])
                        return cached[3], cached[1]
            except TableNotFoundError:
                return None
            dataset = arrow_dataset(table)
            self._tables[name] = (table, dataset, time.monotonic(), table.version())
            return table.version(), dataset

    def kept(self, key: tuple[str, ...], versions: tuple[int | None, ...], compute: Callable[[], T]) -> T:
        """What ``compute()`` returned for ``key``, computed again only when the table ``versions`` it
        was computed from have changed (shared by the page runs and threads of a process)."""
        with self._lock:
            held = self._kept.get(key)
        if held is not None and held[0] == versions:
            return cast(T, held[1])
        value = compute()
        with self._lock:
            self._kept[key] = (versions, value)
        return value

    def warm(self, name: str) -> None:
        """Open the table's snapshot ahead of its first read, and read it into memory when it is one
        of the small tables kept there (:data:`IN_MEMORY`)."""
        found = self.snapshot(name)
        if found is not None and name in IN_MEMORY:
            self._in_memory(name, *found)

    def _in_memory(self, name: str, version: int, dataset: ds.Dataset) -> pa.Table:
        """The whole snapshot ``version`` of a small table, read once into memory."""
        with self._table_lock(f"{name} in memory"):
            held = self._memory.get(name)
            if held is None or held[0] != version:
                held = (version, dataset.to_table())
                self._memory[name] = held
            return held[1]

    def rows(
        self, name: str, site_id: str, days: Range, columns: list[str], where: pc.Expression | None = None
    ) -> pd.DataFrame:
        """Rows of one table for one site and date range (date partitions pruned)."""
        found = self.snapshot(name)
        if found is None:
            return pd.DataFrame(columns=columns)
        version, dataset = found
        condition = (
            text_is("site_id", site_id) & (pc.field("event_date") >= days.start) & (pc.field("event_date") <= days.end)
        )
        if where is not None:
            condition = condition & where
        if name in IN_MEMORY:
            return self._in_memory(name, version, dataset).filter(condition).select(columns).to_pandas()
        return dataset.to_table(columns=columns, filter=condition).to_pandas()

    def traffic(self, site_id: str, days: Range, dimension: str, grain: str = "day") -> pd.DataFrame:
        """agg.traffic_<grain> rows of one dimension ('all' = the site total)."""
        columns = ["window_start", "value", "pageviews", "events", "visitors_sketch"]
        columns += ["engagement_ms_digest", "load_ms_digest"] if dimension == "all" else []
        return self.rows(TRAFFIC_BY_GRAIN[grain].table, site_id, days, columns, text_is("dimension", dimension))

    def visits(self, site_id: str, days: Range, dimension: str, grain: str = "day") -> pd.DataFrame:
        """agg.visits_<grain> rows of one dimension ('all', 'entry_page', 'exit_page', 'source', …)."""
        columns = ["window_start", "value", "visits", "bounces", "duration_ms", "pageviews"]
        return self.rows(VISITS_BY_GRAIN[grain].table, site_id, days, columns, text_is("dimension", dimension))


def _quantiles(digests: pd.Series) -> tuple[float, ...] | None:
    merged = merge_digests(digests.tolist())
    return tuple(digest_quantiles(merged, QUANTILES)) if merged else None


def totals_of(traffic: pd.DataFrame, visits: pd.DataFrame, open_visits: int = 0) -> Totals:
    """KPIs of ``all`` rows of the traffic and visit views, whatever windows they are; ``open_visits``:
    how many of the visits the rows count are still open."""
    return Totals(
        pageviews=int(traffic["pageviews"].sum()),
        events=int(traffic["events"].sum()),
        visitors=union_estimate(traffic["visitors_sketch"]),
        visits=int(visits["visits"].sum()),
        bounces=int(visits["bounces"].sum()),
        duration_ms=int(visits["duration_ms"].sum()),
        visit_pageviews=int(visits["pageviews"].sum()),
        engagement_ms=_quantiles(traffic["engagement_ms_digest"]),
        load_ms=_quantiles(traffic["load_ms_digest"]),
        open_visits=open_visits,
    )


def series_of(traffic: pd.DataFrame, visits: pd.DataFrame, days: Range, grain: str) -> pd.DataFrame:
    """:func:`series` of ``all`` rows of the traffic and visit views of the grain (``hour``, else days)."""
    freq = "h" if grain == "hour" else "D"
    start = pd.Timestamp(days.start, tz="UTC")
    buckets = pd.date_range(start, pd.Timestamp(days.end, tz="UTC") + pd.Timedelta(days=1), freq=freq, inclusive="left")
    frame = pd.DataFrame(index=buckets)
    by_bucket = traffic.assign(window_start=pd.to_datetime(traffic["window_start"], utc=True)).set_index("window_start")
    frame["pageviews"] = by_bucket["pageviews"].reindex(buckets).fillna(0).astype(int)
    estimates = by_bucket["visitors_sketch"].map(lambda s: union_estimate([s]) if s else None)
    frame["visitors"] = estimates.map(lambda e: e.value if e else 0.0).reindex(buckets).fillna(0.0).round()
    frame["visitors_bound"] = estimates.map(lambda e: e.relative_error if e else 0.0).reindex(buckets).fillna(0.0)
    # A window's row of the view, and a row of each open visit that started in it (query.open_visits).
    per_window = visits.assign(window_start=pd.to_datetime(visits["window_start"], utc=True))
    frame["visits"] = per_window.groupby("window_start")["visits"].sum().reindex(buckets).fillna(0).astype(int)
    return frame.rename_axis("time").reset_index()


def top(agg: Aggregates, site_id: str, days: Range, dimension: str, limit: int = 10) -> pd.DataFrame:
    """Top values of a traffic dimension by page views (by events for custom events), with ≈ visitors.

    Only the top ``limit`` values get an HLL union, so the cost does not grow with the number
    of distinct pages.
    """
    return top_of(agg.traffic(site_id, days, dimension), dimension, limit)


def top_of(rows: pd.DataFrame, dimension: str, limit: int) -> pd.DataFrame:
    """:func:`top` of traffic rows of one dimension, whatever windows they are."""
    order = "events" if dimension == "event" else "pageviews"
    if rows.empty:
        return pd.DataFrame(columns=["value", "pageviews", "events", "visitors", "visitors_bound"])
    sums = rows.groupby("value", as_index=False)[["pageviews", "events"]].sum()
    sums = sums.sort_values([order, "value"], ascending=[False, True]).head(limit)
    sketches = rows[rows["value"].isin(sums["value"])].groupby("value")["visitors_sketch"].agg(list)
    estimates = {value: union_estimate(s) for value, s in sketches.items()}
    sums["visitors"] = sums["value"].map(lambda v: round(estimates[v].value))
    sums["visitors_bound"] = sums["value"].map(lambda v: estimates[v].relative_error)
    return sums.reset_index(drop=True)


def top_visits_of(rows: pd.DataFrame, limit: int) -> pd.DataFrame:
    """:func:`top_visits` of visit rows of one dimension, whatever windows they are."""
    if rows.empty:
        return pd.DataFrame(columns=["value", "visits", "bounce_rate", "avg_duration_s"])
    sums = rows.groupby("value", as_index=False)[["visits", "bounces", "duration_ms"]].sum()
    sums = sums.sort_values(["visits", "value"], ascending=[False, True]).head(limit)
    sums["bounce_rate"] = sums["bounces"] / sums["visits"]
    sums["avg_duration_s"] = sums["duration_ms"] / sums["visits"] / 1000
    return sums[["value", "visits", "bounce_rate", "avg_duration_s"]].reset_index(drop=True)


def dimension_values(agg: Aggregates, site_id: str, days: Range, dimension: str, limit: int = 200) -> list[str]:
    """The most viewed values of a dimension (for the filter pickers)."""
    rows = agg.rows(TRAFFIC_1D.table, site_id, days, ["value", "pageviews"], text_is("dimension", dimension))
    ranked = rows.groupby("value")["pageviews"].sum().sort_values(ascending=False)
    return [str(v) for v in ranked.head(limit).index]


def realtime_visitors(agg: Aggregates, site_id: str, now: dt.datetime) -> Estimate | None:
    """≈ visitors in the 5-minute hopping window ending at the current minute (agg.active_5m)."""
    minute = now.replace(second=0, microsecond=0)
    start = minute - dt.timedelta(minutes=4)
    rows = agg.rows(
        ACTIVE_5M.table,
        site_id,
        Range(start.date(), start.date()),
        ["visitors_sketch"],
        pc.field("window_start") == pd.Timestamp(start),
    )
    return union_estimate(rows["visitors_sketch"]) if not rows.empty else None


def goal_visitors(agg: Aggregates, site_id: str, days: Range, step: Step) -> Estimate:
    """≈ visitors who viewed a page or sent a custom event (HLL union of that value's windows)."""
    dimension = "page" if step.kind == "page" else "event"
    rows = agg.rows(
        TRAFFIC_1D.table,
        site_id,
        days,
        ["visitors_sketch"],
        text_is("dimension", dimension) & text_is("value", step.value),
    )
    return union_estimate(rows["visitors_sketch"])


def kept_keys(rows: pd.DataFrame) -> pd.DataFrame:
    """(event_date, key) pairs a report shows: each day's ``MAX_KEYS_PER_DAY`` keys carried by the
    most events, over every event name (ties: the key that sorts first). ``rows``: agg.props_1d rows
    with at least ``event_date``, ``key`` and ``events``."""
    by_key = rows.groupby(["event_date", "key"], as_index=False)["events"].sum()
    by_key = by_key.sort_values(["event_date", "events", "key"], ascending=[True, False, True])
    return by_key[by_key.groupby("event_date").cumcount() < MAX_KEYS_PER_DAY][["event_date", "key"]]


def fold_values(rows: pd.DataFrame) -> pd.DataFrame:
    """agg.props_1d rows with each (day, event name, key)'s values past ``MAX_VALUES_PER_KEY`` (by
    events, ties: the value that sorts first) renamed ``(other)``; a later group-by adds their events
    and unions their sketches."""
    ranked = rows.sort_values(
        ["event_date", "name", "key", "events", "value"], ascending=[True, True, True, False, True]
    )
    past_cap = ranked.groupby(["event_date", "name", "key"]).cumcount() >= MAX_VALUES_PER_KEY
    return ranked.assign(value=ranked["value"].where(~past_cap, OTHER_VALUE))


def property_keys(agg: Aggregates, site_id: str, days: Range) -> pd.DataFrame:
    """The property keys of custom events a report can break down (each day's kept keys), with the
    event name and its events, most events first (for the key picker)."""
    rows = agg.rows(PROPS_1D.table, site_id, days, ["event_date", "name", "key", "events"])
    if rows.empty:
        return pd.DataFrame(columns=["name", "key", "events"])
    rows = rows.merge(kept_keys(rows), on=["event_date", "key"])
    sums = rows.groupby(["name", "key"], as_index=False)["events"].sum()
    return sums.sort_values(["events", "name", "key"], ascending=[False, True, True]).reset_index(drop=True)


def props(
    agg: Aggregates, site_id: str, days: Range, key: str, *, name: str | None = None, limit: int = 10
) -> pd.DataFrame:
    """Values of one property key (of one event name, or of every one): exact events and ≈ visitors
    (an HLL union, with its relative 95% bound), the ``limit`` values with the most events first,
    then ``(other)``: the values past the bound of ``tally.props``, folded day by day."""
    columns = ["value", "events", "visitors", "visitors_bound"]
    every_key = agg.rows(PROPS_1D.table, site_id, days, ["event_date", "key", "events"])
    kept = kept_keys(every_key) if not every_key.empty else every_key
    kept_days = kept.loc[kept["key"] == key, "event_date"].tolist()
    where = text_is("key", key)
    if name is not None:
        where = where & text_is("name", name)
    rows = agg.rows(
        PROPS_1D.table, site_id, days, ["event_date", "name", "key", "value", "events", "visitors_sketch"], where
    )
    rows = rows[rows["event_date"].isin(kept_days)]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    folded = fold_values(rows)
    sums = folded.groupby("value", as_index=False)["events"].sum()
    named = sums[sums["value"] != OTHER_VALUE].sort_values(["events", "value"], ascending=[False, True])
    shown = pd.concat([named.head(limit), sums[sums["value"] == OTHER_VALUE]], ignore_index=True)
    sketches = folded[folded["value"].isin(shown["value"])].groupby("value")["visitors_sketch"].agg(list)
    estimates = {value: union_estimate(s) for value, s in sketches.items()}
    shown["visitors"] = shown["value"].map(lambda v: round(estimates[v].value))
    shown["visitors_bound"] = shown["value"].map(lambda v: estimates[v].relative_error)
    return shown[columns]


VISIT_COLUMNS = ["window_start", "value", "visits", "bounces", "duration_ms", "pageviews"]
# A visit as agg.sessions has it, the columns the reports read: the open visits' rows (query.open_visits).
SESSION_COLUMNS = [
    "session_start",
    "bounce",
    "duration_ms",
    "pageviews",
    "entry_page",
    "exit_page",
    *AUDIENCE_DIMENSIONS,
]


def visit_rows_of(sessions_rows: pd.DataFrame, dimension: str) -> pd.DataFrame:
    """Rows of ``agg.sessions``' shape (closed visits, or the open ones of :mod:`query.open_visits`)
    as visit-view rows of one dimension: one a visit, ``window_start`` its start."""
    column = VISIT_DIMENSIONS.get(dimension)
    value = sessions_rows[column].astype(object).where(sessions_rows[column].notna(), NONE_VALUE) if column else ""
    return pd.DataFrame(
        {
            "window_start": sessions_rows["session_start"],
            "value": value,
            "visits": 1,
            "bounces": sessions_rows["bounce"].astype(int),
            "duration_ms": sessions_rows["duration_ms"],
            "pageviews": sessions_rows["pageviews"],
        },
        columns=VISIT_COLUMNS,
    )


def with_rows(frame: pd.DataFrame, more: pd.DataFrame) -> pd.DataFrame:
    """``frame`` and ``more`` (rows of the same columns) as one frame."""
    if more.empty:
        return frame
    return more.reset_index(drop=True) if frame.empty else pd.concat([frame, more], ignore_index=True)


# The open visits of a report's site (sessions-shaped rows, query.open_visits), asked only when a
# figure needs them; None: the report counts closed visits only.
OpenVisits = Callable[[], pd.DataFrame] | None


@dataclass(frozen=True)
class AggregateReport:
    """The standard panels of one site and range, from the aggregate tables (same methods as
    ``query.raw.RawQuery``, so the page does not care which one answers); visits still open, which
    the views have not written yet, are added from ``open`` (:mod:`query.open_visits`)."""

    agg: Aggregates
    site_id: str
    days: Range
    open: OpenVisits = None
    exact = False

    def open_visits(self) -> pd.DataFrame:
        """The site's open visits that started in the range (``agg.sessions``' shape)."""
        rows = self.open() if self.open is not None else pd.DataFrame(columns=SESSION_COLUMNS)
        if rows.empty:
            return rows
        started = rows["session_start"].dt.date
        return rows[(started >= self.days.start) & (started <= self.days.end)]

    def _visits(self, dimension: str, grain: str = "day") -> pd.DataFrame:
        opened = visit_rows_of(self.open_visits(), dimension)
        bucket = "h" if grain == "hour" else "D"  # the view's window of the grain the visit started in
        opened["window_start"] = pd.to_datetime(opened["window_start"], utc=True).dt.floor(bucket)
        return with_rows(self.agg.visits(self.site_id, self.days, dimension, grain), opened)

    def totals(self) -> Totals:
        traffic = self.agg.traffic(self.site_id, self.days, "all")
        return totals_of(traffic, self._visits(ALL), open_visits=len(self.open_visits()))

    def series(self, grain: str) -> pd.DataFrame:
        suffix = "hour" if grain == "hour" else "day"
        traffic = self.agg.traffic(self.site_id, self.days, "all", suffix)
        return series_of(traffic, self._visits(ALL, suffix), self.days, grain)

    def top(self, dimension: str, limit: int = 10) -> pd.DataFrame:
        return top(self.agg, self.site_id, self.days, dimension, limit)

    def top_visits(self, dimension: str, limit: int = 10) -> pd.DataFrame:
        return top_visits_of(self._visits(dimension), limit)

    def goal(self, step: Step) -> Estimate:
        return goal_visitors(self.agg, self.site_id, self.days, step)

    def props(self, key: str, limit: int = 10, name: str | None = None) -> pd.DataFrame:
        return props(self.agg, self.site_id, self.days, key, name=name, limit=limit)

    def property_keys(self) -> pd.DataFrame:
        return property_keys(self.agg, self.site_id, self.days)
