"""Any stats query answered exactly from ``raw.pageviews`` with DuckDB.

The aggregate views keep one dimension per row, so several dimensions, filters of any shape,
goals, custom properties and week or month buckets are answered here instead, from the events
themselves: visitors are distinct visitor ids, visits are sessionised with the views' rule
(:mod:`query.raw`), and every figure is exact.

Two kinds of rows are counted, as the views count them:

- *event metrics* (visitors, page views, events, percentiles) count events; a ``visit:*``
  dimension or filter reads the event's own value (so page views by ``visit:source`` count each
  page view under its own source, as ``agg.traffic_*`` does), except entry and exit pages, which
  belong to the visit;
- *visit metrics* (visits, bounce rate, visit duration, views per visit) count visits; a
  ``visit:*`` dimension or filter reads the visit's first event (as ``agg.visits_*`` does), and
  a visit matches an event filter when one of its events matches (a visit "to /pricing").
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds

from query.aggregates import Range
from query.goals import Step
from query.raw_events import COLUMNS, VISIT_ATTRIBUTES, Interval, memory_limit, open_events, visits_sql, within
from query.scan_cache import prepared_scan
from query.site_time import UTC, is_utc
from query.spec import (
    GOAL,
    PERCENTILE_KINDS,
    PERCENTILE_METRICS,
    PERCENTILES,
    VISIT_METRICS,
    Filter,
    Query,
    QueryError,
    dimension,
)
from tally.dimensions import NONE_VALUE

# "events" counts custom events (the dashboard's word); "all_events" page views and custom events
# (Plausible's `events`). With an event:goal dimension both count conversions.
EVENT_METRICS = ("visitors", "pageviews", "events", "all_events", *PERCENTILE_METRICS)
VISIT_SUMS = ("visits", "bounces", "duration_ms", "visit_pageviews")
_READS_EVENTS = re.compile(r"\b[eg]\.")  # SQL that reads an event's (``e``) or a goal's (``g``) columns
_TRUNC = {"hour": "hour", "day": "day", "week": "week", "month": "month"}
Row = dict[str, Any]


@dataclass
class _Sql:
    """Positional parameters gathered while an SQL text is built."""

    params: list[Any] = field(default_factory=list)

    def bind(self, value: Any) -> str:
        self.params.append(value)
        return f"${len(self.params)}"


@dataclass(frozen=True)
class ExactQuery:
    """One site's non-bot raw events over a range of dates, and the goals configured for it."""

    raw: ds.Dataset
    site_id: str
    gap_ms: int
    goals: tuple[Step, ...] = ()  # none configured: every custom event name is a goal
    # The table's identity and version (``raw``'s snapshot): given, the events of a range are read
    # and sessionised once for every question over it (:class:`query.scans.PreparedScan`); None reads them per question.
    snapshot: tuple[str, int] | None = None
    exact = True

    def answer(self, query: Query) -> list[Row]:
        """Rows of ``{"dimensions": [...], "metrics": {name: value}}``, unordered, every metric filled,
        rounded as the API shows them."""
        return [
            {"dimensions": r["dimensions"], "metrics": _shown(r["metrics"], query.metrics)} for r in self.measure(query)
        ]

    def measure(self, query: Query) -> list[Row]:
        """Rows with each metric unrounded, visit metrics as sums (``visits``, ``bounces``,
        ``duration_ms``, ``visit_pageviews``), for :class:`query.raw.RawQuery`'s report."""
        interval = query.utc_interval()  # date-times, or the site's local days
        if self.snapshot is not None:
            return self._prepared_measure(query, interval)
        with open_events(self.raw, self.site_id, Range(*query.utc_dates()), COLUMNS) as con:
            con.execute(f"CREATE TEMP VIEW evr AS SELECT * FROM ev WHERE {within(interval)}")
            if _needs_visits(query):
                try:
                    con.execute(visits_sql(_visitors_asked(con, query), self.gap_ms))
                except duckdb.InvalidInputException as e:  # the visitors' condition: a `matches` pattern
                    raise _bad_pattern(e) from e
            return self._answer(con, query)

    def _prepared_measure(self, query: Query, interval: Interval) -> list[Row]:
        """:meth:`measure` over the range's :class:`query.scans.PreparedScan` (read and sessionised once)."""
        assert self.snapshot is not None
        scan = prepared_scan(self.raw, self.snapshot, self.site_id, Range(*query.utc_dates()), interval, self.gap_ms)
        with scan.cursor() as con:
            return self._answer(con, query)

    def _answer(self, con: duckdb.DuckDBPyConnection, query: Query) -> list[Row]:
        """The rows of ``query`` over ``evr`` (and ``numbered``/``visits`` when it needs visits)."""
        goals = self._goals(con, query)
        con.register(
            "goals",
            pa.table(
                {
                    "label": pa.array([goal_label(g) for g in goals], pa.string()),
                    "kind": pa.array([g.kind for g in goals], pa.string()),
                    "value": pa.array([g.value for g in goals], pa.string()),
                }
            ),
        )
        try:
            # the goals found in the events (none configured) are the ones the filters name
            return dataclasses.replace(self, goals=goals)._rows(con, query)
        except duckdb.InvalidInputException as e:  # a `matches` pattern RE2 cannot compile
            raise _bad_pattern(e) from e
        except duckdb.OutOfMemoryException as e:
            raise QueryError(
                "body",
                f"this question needs more than {memory_limit()} of memory: narrow the range or the dimensions",
            ) from e

    def _goals(self, con: duckdb.DuckDBPyConnection, query: Query) -> tuple[Step, ...]:
        if self.goals or not _mentions(query, GOAL):
            return self.goals
        names = con.execute("SELECT DISTINCT name FROM evr WHERE type = 'event' AND name IS NOT NULL").fetchall()
        return tuple(Step("event", str(n)) for (n,) in sorted(names))

    def _rows(self, con: duckdb.DuckDBPyConnection, query: Query) -> list[Row]:
        event_metrics = [m for m in query.metrics if m not in VISIT_METRICS]
        visit_metrics = [m for m in query.metrics if m in VISIT_METRICS]
        merged: dict[tuple[str, ...], Row] = {}
        if event_metrics:
            percentiles = any(m in PERCENTILE_METRICS for m in query.metrics)
            for key, values in self._event_rows(con, query, query.dimensions, query.filters, percentiles).items():
                merged.setdefault(key, {})
                merged[key].update(values)
        if visit_metrics:
            for key, values in self._visit_rows(con, query).items():
                merged.setdefault(key, {})
                merged[key].update(values)
        if "percentage" in query.metrics:
            total = self._event_rows(con, query, (), query.filters).get((), {}).get("visitors", 0)
            for values in merged.values():
                values["percentage"] = round(100 * values.get("visitors", 0) / total, 1) if total else None
        if "conversion_rate" in query.metrics:
            self._conversion_rates(con, query, merged)
        return [{"dimensions": list(key), "metrics": values} for key, values in merged.items()]

    def _event_rows(
        self,
        con: duckdb.DuckDBPyConnection,
        query: Query,
        dimensions: Sequence[str],
        filters: Iterable[Filter],
        percentiles: bool = False,
    ) -> dict[tuple[str, ...], Row]:
        """The event metrics of each row; the engagement and load percentiles only with ``percentiles``
        (None otherwise): their quantiles took about two thirds of a top-pages question (90 days of
        10M events, one country: 675 ms with them, 209 without). Each kind's three quantiles are one
        ``quantile_cont`` over a list of them, which orders the values once instead of three times
        (totals of one country: 99 ms instead of 159)."""
        sql = _Sql()
        visits = any(_visit_owned(d) for d in itertools.chain(dimensions, _leaves(filters)))
        source = "numbered e JOIN visits v USING (visitor_id, visit)" if visits else "evr e"
        if GOAL in dimensions:
            source += f" JOIN goals g ON {_goal_match('e', 'g')}"
        keys = [_dimension_sql(d, "event", query.timezone) for d in dimensions]
        where = [_filter_sql(f, sql, "event", self.goals) for f in filters] or ["true"]
        if any(dimension(d).name == "name" for d in dimensions):
            where.append("e.type IN ('pageview', 'event')")  # engagement beacons are not events of their own
        events = "count(*)" if GOAL in dimensions else "count(*) FILTER (WHERE e.type = 'event')"
        every = "count(*)" if GOAL in dimensions else "count(*) FILTER (WHERE e.type IN ('pageview', 'event'))"
        selects = [
            *(f"{k} AS d{i}" for i, k in enumerate(keys)),
            "count(DISTINCT e.visitor_id) AS visitors",
            "count(*) FILTER (WHERE e.type = 'pageview') AS pageviews",
            f"{events} AS events",
            f"{every} AS all_events",
            *(
                f"quantile_cont(e.{kind}_ms, [{', '.join(str(q / 100) for q in PERCENTILES)}]) FILTER (WHERE e.type = "
                f"'{'engagement' if kind == 'engagement' else 'pageview'}') AS {kind}_quantiles"
                if percentiles
                else f"NULL::DOUBLE[] AS {kind}_quantiles"
                for kind in PERCENTILE_KINDS
            ),
        ]
        group = f"GROUP BY {', '.join(f'd{i}' for i in range(len(keys)))}" if keys else ""
        text = f"SELECT {', '.join(selects)} FROM {source} WHERE {' AND '.join(where)} {group}"
        frame = con.execute(text, sql.params).fetchall()
        names = [*(f"d{i}" for i in range(len(keys))), *(m for m in EVENT_METRICS if m not in PERCENTILE_METRICS)]
        rows: dict[tuple[str, ...], Row] = {}
        for record in frame:
            values = dict(zip(names, record[: len(names)], strict=True))
            for kind, quantiles in zip(PERCENTILE_KINDS, record[len(names) :], strict=True):
                found = quantiles or [None] * len(PERCENTILES)  # None: no value to take them of
                values |= {f"{kind}_p{q}": v for q, v in zip(PERCENTILES, found, strict=True)}
            if not keys and not values["visitors"]:
                values = {**values, "visitors": 0}
            key = tuple(_label_of(d, values[f"d{i}"], query.start) for i, d in enumerate(dimensions))
            rows[key] = {m: values[m] if m in PERCENTILE_METRICS else int(values[m] or 0) for m in EVENT_METRICS}
        return rows

    def _visit_rows(self, con: duckdb.DuckDBPyConnection, query: Query) -> dict[tuple[str, ...], Row]:
        sql = _Sql()
        keys = [_dimension_sql(d, "visit", query.timezone) for d in query.dimensions]
        where = [_filter_sql(f, sql, "visit", self.goals) for f in query.filters] or ["true"]
        dims = ", ".join(f"d{i}" for i in range(len(keys)))
        counted = f"""SELECT {dims + "," if dims else ""} count(*) AS visits,
                   count(*) FILTER (WHERE v.pageviews = 1) AS bounces,
                   coalesce(sum(v.duration_ms), 0) AS duration_ms, coalesce(sum(v.pageviews), 0) AS visit_pageviews"""
        group = f"GROUP BY {dims}" if dims else ""
        if GOAL not in query.dimensions and not any(_READS_EVENTS.search(text) for text in (*keys, *where)):
            # Only the visits' own attributes (country, source, …) are read: each row of ``visits`` is
            # one visit, counted as it is, without the DISTINCT over visitor ids and the join back that
            # matching events needs (over 200k visits: 2 ms instead of 200).
            selected = ", ".join([*(f"{k} AS d{i}" for i, k in enumerate(keys)), "v.pageviews", "v.duration_ms"])
            text = f"{counted} FROM (SELECT {selected} FROM visits v WHERE {' AND '.join(where)}) v {group}"
        else:  # a visit matches when one of its events does (a page, a goal, a property)
            source = "numbered e JOIN visits v USING (visitor_id, visit)"
            if GOAL in query.dimensions:
                source += f" JOIN goals g ON {_goal_match('e', 'g')}"
            distinct = ", ".join([*(f"{k} AS d{i}" for i, k in enumerate(keys)), "v.visitor_id", "v.visit"])
            text = f"""
                WITH matching AS (SELECT DISTINCT {distinct} FROM {source} WHERE {" AND ".join(where)})
                {counted} FROM matching m JOIN visits v USING (visitor_id, visit) {group}
            """
        rows: dict[tuple[str, ...], Row] = {}
        for record in con.execute(text, sql.params).fetchall():
            labels, sums = record[: len(keys)], record[len(keys) :]
            key = tuple(_label_of(d, v, query.start) for d, v in zip(query.dimensions, labels, strict=True))
            rows[key] = dict(zip(VISIT_SUMS, (int(s) for s in sums), strict=True))
        return rows

    def _conversion_rates(
        self, con: duckdb.DuckDBPyConnection, query: Query, merged: dict[tuple[str, ...], Row]
    ) -> None:
        """Converted visitors over all visitors of the same row, without the goal (as Plausible)."""
        others = [d for d in query.dimensions if d != GOAL]
        base = self._event_rows(con, query, others, _without_goals(query.filters))
        positions = [i for i, d in enumerate(query.dimensions) if d != GOAL]
        for key, values in merged.items():
            total = base.get(tuple(key[i] for i in positions), {}).get("visitors", 0)
            values["conversion_rate"] = round(100 * values.get("visitors", 0) / total, 2) if total else None


def matching_values(values: Sequence[str], name: str, filters: Iterable[Filter]) -> set[str]:
    """The values of dimension ``name`` that ``filters`` (on that dimension only) keep, decided by the
    same SQL the raw answers use, so an aggregate answer narrowed by them matches the raw one."""
    counting = "visit" if dimension(name).kind == "visit" else "event"
    alias, column = _dimension_sql(name, counting).split(".")
    sql = _Sql()
    where = " AND ".join(_filter_sql(f, sql, counting, ()) for f in filters) or "true"
    con = duckdb.connect()
    try:
        con.register(alias, pa.table({column: pa.array(list(values), pa.string())}))
        return {str(v) for (v,) in con.execute(f"SELECT {column} FROM {alias} WHERE {where}", sql.params).fetchall()}
    except duckdb.InvalidInputException as e:
        raise QueryError("filters", f"a filter's regular expression is not valid: {e}") from e
    finally:
        con.close()


def event_condition(filters: Iterable[Filter]) -> tuple[str, list[Any]]:
    """The SQL condition over event rows ``e`` that ``filters`` keep (each event's own values, as the
    event metrics count them) and its positional parameters: for answers built beside
    :class:`ExactQuery`, such as the Core Web Vitals of :mod:`query.vitals`."""
    sql = _Sql()
    return " AND ".join(_filter_sql(f, sql, "event", ()) for f in filters) or "true", sql.params


def _bad_pattern(e: duckdb.InvalidInputException) -> QueryError:
    return QueryError("filters", f"a filter's regular expression is not valid: {e}")


def _visitors_asked(con: duckdb.DuckDBPyConnection, query: Query) -> str:
    """The events to sessionise for ``query``, a view of ``evr``'s: only the visitors with an event
    that meets :func:`visitors_condition` (all their events), or all of ``evr`` when no filter gives
    one. Over 90 days of 10M events (DuckDB reading the files), a question with visit figures about
    one country took 11.6 s instead of 33.2 (DE, 19% of the events) and 18.8 s instead of 33.5 (US,
    46%); most of what is left is reading every event's columns to keep those visitors' (9.4 s)."""
    found = visitors_condition(query.filters)
    if found is None:
        return "evr"
    condition, params = found
    con.execute(f"CREATE TEMP TABLE asked AS SELECT DISTINCT visitor_id FROM evr e WHERE {condition}", params)
    con.execute(
        "CREATE TEMP VIEW evr_asked AS SELECT e.* FROM evr e SEMI JOIN asked "
        "ON e.visitor_id IS NOT DISTINCT FROM asked.visitor_id"
    )
    return "evr_asked"


def visitors_condition(filters: Iterable[Filter]) -> tuple[str, list[Any]] | None:
    """A condition on single events (``e``) that every visitor an answer under ``filters`` counts has
    an event meeting, with its parameters: that of the first top-level filter matching one dimension
    positively (``is``, ``contains``, ``matches``; not a goal). None when there is no such filter.

    A row the answer counts meets every top-level filter: an event that meets it itself, or a visit
    whose first event (its attributes), first or last page view (entry and exit page) or some event
    (a page, a name, a property) does. Sessionising only those visitors' events, all of them, gives
    their visits as sessionising every visitor's would, and no other visitor's row is counted."""
    for f in filters:
        if f.dimension is None or f.dimension == GOAL or f.op not in ("is", "contains", "matches"):
            continue
        d = dimension(f.dimension)
        if d.kind == "visit":
            value = f"e.{'path' if d.name in ('entry_page', 'exit_page') else d.column}"
        else:
            value = _dimension_sql(f.dimension, "event")
        sql = _Sql()
        shown = f"coalesce({value}, '{NONE_VALUE}')"
        return "(" + " OR ".join(_match(shown, f.op, v, f.case_sensitive, sql) for v in f.values) + ")", sql.params
    return None


def leaves(filters: Iterable[Filter]) -> list[str]:
    """The dimensions a filter tree names."""
    return _leaves(filters)


def _needs_visits(query: Query) -> bool:
    return bool(set(query.metrics) & set(VISIT_METRICS)) or any(
        _visit_owned(d) for d in itertools.chain(query.dimensions, _leaves(query.filters))
    )


def _leaves(filters: Iterable[Filter]) -> list[str]:
    out: list[str] = []
    for f in filters:
        out.extend([f.dimension] if f.dimension else _leaves(f.children))
    return out


def _mentions(query: Query, name: str) -> bool:
    return name in query.dimensions or name in _leaves(query.filters)


def _visit_owned(name: str) -> bool:
    return dimension(name).kind == "visit"


def _without_goals(filters: Iterable[Filter]) -> tuple[Filter, ...]:
    """The top-level filters that do not name a goal (the base a conversion rate divides by)."""
    return tuple(f for f in filters if GOAL not in _leaves([f]))


def _dimension_sql(name: str, counting: str, timezone: str = UTC) -> str:
    """The SQL value of a dimension for event rows (``e``) or visit rows (``v`` for visit attributes);
    a time bucket is the site's local date or hour in ``timezone``."""
    d = dimension(name)
    if d.kind == "time":
        at = "e.event_time" if counting == "event" else "v.started"
        instant = f"make_timestamp({at} * 1000)"
        if not is_utc(timezone):  # the wall clock of the site's zone (DuckDB's ICU time zones)
            instant = f"timezone({_quote(timezone)}, {instant} AT TIME ZONE 'UTC')"
        return f"date_trunc('{_TRUNC[d.name]}', {instant})"
    if d.name == "goal":
        return "g.label"
    if d.name == "props":
        return f"e.props[{_quote(d.column)}]"
    if d.name == "name":
        return "CASE WHEN e.type = 'pageview' THEN 'pageview' ELSE e.name END"
    if d.kind == "visit" or (counting == "visit" and d.column in VISIT_ATTRIBUTES):
        return f"v.{d.column}"
    return f"e.{d.column}"


def _filter_sql(f: Filter, sql: _Sql, counting: str, goals: tuple[Step, ...], negate: bool = False) -> str:
    """The SQL condition of a filter tree, with ``not`` pushed down to the leaves (De Morgan), so
    that a leaf that holds only for some kinds of event keeps that restriction when negated: "a
    visit not to /x" is a visit with a page view of another page, never its engagement beacon."""
    if f.op in ("and", "or"):
        joiner = {"and": " OR ", "or": " AND "}[f.op] if negate else f" {f.op.upper()} "
        return "(" + joiner.join(_filter_sql(c, sql, counting, goals, negate) for c in f.children) + ")"
    if f.op == "not":
        return _filter_sql(f.children[0], sql, counting, goals, not negate)
    negated, op = f.op.endswith("_not") != negate, f.op.removesuffix("_not")
    if f.dimension == GOAL:
        return _goal_filter(f, op, sql, goals, negated)
    value = f"coalesce({_dimension_sql(f.dimension, counting)}, '{NONE_VALUE}')"
    condition = "(" + " OR ".join(_match(value, op, v, f.case_sensitive, sql) for v in f.values) + ")"
    condition = f"NOT {condition}" if negated else condition
    if counting == "visit" and f.dimension == "event:page":
        return f"(e.type = 'pageview' AND {condition})"  # a visit "to /pricing" viewed it
    if dimension(f.dimension).name == "name":
        return f"(e.type IN ('pageview', 'event') AND {condition})"  # engagement beacons are not events
    return condition


def _match(value: str, op: str, pattern: str, case_sensitive: bool, sql: _Sql) -> str:
    if op == "matches":
        flags = "" if case_sensitive else ", 'i'"
        return f"regexp_matches({value}, {sql.bind(pattern)}{flags})"
    if not case_sensitive:
        value, pattern = f"lower({value})", pattern.lower()
    if op == "contains":
        return f"contains({value}, {sql.bind(pattern)})"
    return f"{value} = {sql.bind(pattern)}"


def _goal_filter(f: Filter, op: str, sql: _Sql, goals: tuple[Step, ...], negated: bool) -> str:
    """Events that complete one of the named goals (``is``) or one whose name contains a value
    (``negated``: page views and custom events that complete none of them)."""
    if op == "matches":
        raise QueryError("filters", "'matches' on event:goal is not supported: use 'is' or 'contains'")
    known = {goal_label(g): g for g in goals}
    chosen: list[Step] = []
    for value in f.values:
        if op == "is":
            hits = [g for label, g in known.items() if _same(label, value, f.case_sensitive)]
            if not hits and goals:
                raise QueryError("filters", f"goal {value!r} is not configured for this site")
        else:
            hits = [g for label, g in known.items() if _within(value, label, f.case_sensitive)]
        chosen.extend(hits)
    # One bound list per kind, however many goals match: a goal per custom event name may be thousands.
    pages = sorted({g.value for g in chosen if g.kind == "page"})
    names = sorted({g.value for g in chosen if g.kind == "event"})
    condition = (
        f"((e.type = 'pageview' AND list_contains({sql.bind(pages)}::VARCHAR[], e.path)) OR "
        f"(e.type = 'event' AND list_contains({sql.bind(names)}::VARCHAR[], e.name)))"
    )
    return f"(e.type IN ('pageview', 'event') AND NOT {condition})" if negated else condition


def _goal_match(events: str, goals: str) -> str:
    return (
        f"(({goals}.kind = 'event' AND {events}.type = 'event' AND {events}.name = {goals}.value) OR "
        f"({goals}.kind = 'page' AND {events}.type = 'pageview' AND {events}.path = {goals}.value))"
    )


def goal_label(goal: Step) -> str:
    """A goal's display name, as Plausible's: the event's name, or ``Visit /path``."""
    return goal.value if goal.kind == "event" else f"Visit {goal.value}"


def _same(a: str, b: str, case_sensitive: bool) -> bool:
    return a == b if case_sensitive else a.lower() == b.lower()


def _within(part: str, whole: str, case_sensitive: bool) -> bool:
    return part in whole if case_sensitive else part.lower() in whole.lower()


def _label_of(name: str, value: Any, start: dt.date) -> str:
    """A dimension's value as the API shows it: times as Plausible writes them (a week by its
    Monday, or by the range's first day when the Monday is before it), ``(none)`` for no value."""
    d = dimension(name)
    if value is None:
        return NONE_VALUE
    if d.kind == "time" and isinstance(value, dt.date):  # DuckDB truncates to a date for days and longer
        at = value if isinstance(value, dt.datetime) else dt.datetime.combine(value, dt.time())
        return time_label(at, d.name, start)
    return str(value)


def time_label(value: dt.datetime, grain: str, start: dt.date) -> str:
    """A time bucket's label: ``2026-11-25 13:00:00`` for an hour, else a date."""
    if grain == "hour":
        return value.strftime("%Y-%m-%d %H:00:00")
    day = value.date()
    return max(day, start).isoformat() if grain == "week" else day.isoformat()


def _shown(values: Row, metrics: Sequence[str]) -> Row:
    """A row's metrics as the API shows them: rates from the visit sums, rounded as Plausible rounds."""
    visits = values.get("visits", 0)
    shown: Row = {}
    for metric in metrics:
        if metric == "bounce_rate":
            shown[metric] = round(100 * values["bounces"] / visits, 1) if visits else None
        elif metric == "visit_duration":
            shown[metric] = round(values["duration_ms"] / visits / 1000) if visits else None
        elif metric == "views_per_visit":
            shown[metric] = round(values["visit_pageviews"] / visits, 2) if visits else None
        elif metric in PERCENTILE_METRICS:
            shown[metric] = _rounded(values.get(metric), 0)
        elif metric == "events":  # Plausible's: page views and custom events
            shown[metric] = values.get("all_events", 0)
        else:
            shown[metric] = values.get(metric, 0 if metric in ("visitors", "pageviews", "events", "visits") else None)
    return shown


def _rounded(value: Any, digits: int) -> float | int | None:
    if value is None:
        return None
    return round(float(value)) if digits == 0 else round(float(value), digits)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
