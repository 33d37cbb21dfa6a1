"""Answer a :class:`query.spec.Query` from the aggregate tables when it fits them, else exactly from raw events.

A query fits the aggregates when it has no filters, whole days, at most one dimension that the
views keep, and metrics that view rows carry (:func:`fits_aggregates`); it is then answered by
the same report methods the dashboard's panels call. Anything else (filters of any shape,
several dimensions, goals, custom properties, weeks and months, conversion rates) is answered
by :class:`query.exact.ExactQuery` over ``raw.pageviews``. Either way no figure is computed two
ways, and ``meta`` says which source answered and, per metric, whether it is exact or
approximate with its 95% bound. ``include.compare`` runs the same query over the comparison
range and puts its figures and the change beside each row, as Plausible's response does.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import pandas as pd
import pyarrow as pa

from query import imported
from query.exact import ExactQuery, leaves, matching_values, time_label
from query.report import Report
from query.site_time import LocalDays, buckets, is_utc, local_time
from query.spec import (
    MAX_LIMIT,
    PERCENTILE_METRICS,
    SCROLL_DEPTH,
    VISIT_METRICS,
    VITAL_BAND_METRICS,
    VITALS_METRICS,
    Query,
    QueryError,
    dimension,
)
from query.vitals import VitalsSources, fits_vitals_view, is_vitals_query, vitals_metric_meta, vitals_rows
from tally.props import MAX_KEYS_PER_DAY, MAX_VALUES_PER_KEY, OTHER_VALUE
from tally.sketches import Estimate

PROPS_MEANING = (
    "from agg.props_1d: the custom events that carry the property (no (none) row); each day's "
    f"{MAX_KEYS_PER_DAY} most frequent keys, and per key its {MAX_VALUES_PER_KEY} most frequent values, "
    f"the rest summed as {OTHER_VALUE}. Add a filter beyond event:name for an exact answer from raw events"
)
_TIME_METRICS = ("visitors", "pageviews", "visits")
_TRAFFIC_METRICS = ("visitors", "pageviews", "events", "percentage", "visits", "bounce_rate", "visit_duration")
_ENTRY_EXIT_METRICS = ("visits", "bounce_rate", "visit_duration")
_COUNTS = ("visitors", "pageviews", "events", "visits")  # 0 where a row has none; rates are null


class Sources(VitalsSources, Protocol):
    """Where answers come from (:class:`query.sources.Sources`); its vitals methods are :class:`VitalsSources`'."""

    def aggregate_report(self, site_id: str, start: dt.date, end: dt.date) -> Report: ...
    def exact(self, site_id: str) -> ExactQuery | None: ...
    def visitors_meaning(self, site_id: str, start: dt.date, end: dt.date) -> str: ...
    def open_visits(self, site_id: str, start: dt.date, end: dt.date) -> int: ...
    def imported(self, site_id: str, start: dt.date, end: dt.date, table: str) -> pa.Table: ...
    def imported_ranges(self, site_id: str, start: dt.date, end: dt.date) -> pa.Table: ...


@dataclass(frozen=True)
class Answer:
    """The rows of a query and what they mean."""

    results: list[dict[str, Any]]
    meta: dict[str, Any]


def fits_aggregates(query: Query) -> bool:
    """Whether the aggregate views hold this query's answer (otherwise raw events answer it)."""
    if is_vitals_query(query):
        return fits_vitals_view(query)
    if query.between is not None or len(query.dimensions) > 1 or "conversion_rate" in query.metrics:
        return False
    metrics = set(query.metrics)
    d = query.dimension
    if d is not None and d.name == "props":  # agg.props_1d: one property's values, of one event name or all
        # ... of whole UTC days: a site in another zone gets them from raw events
        return metrics <= {"visitors", "events"} and _event_name(query) is not False and is_utc(query.timezone)
    if query.filters and not _on_own_dimension(query):
        return False
    if d is None:
        return True
    if not d.aggregated:
        return False
    if d.kind == "time":
        return metrics <= set(_TIME_METRICS)
    if d.kind == "visit":
        return metrics <= set(_ENTRY_EXIT_METRICS)
    if d.name == "page" and metrics & set(VISIT_METRICS):
        return False  # the visit views keep entry and exit pages, not every page of a visit
    return metrics <= set(_TRAFFIC_METRICS)


def run(query: Query, sources: Sources) -> Answer:
    """Answer ``query``; raises :class:`QueryError` for a question Tally cannot answer."""
    rows, source, imports, imported_visitors = (
        _with_imports(query, sources) if query.imports else (*_rows(query, sources), {}, "")
    )
    rows = _ordered(rows, query)
    meta: dict[str, Any] = {"source": source, "metrics": {m: _metric_meta(m, rows, source) for m in query.metrics}}
    meta.update(imports)
    if imports.get("imports_included") and "visitors" in query.metrics:
        meta["metrics"]["visitors"] = {"exact": False, "method": imported_visitors}
    meta["timezone"] = query.timezone  # the zone the dates and time buckets are the site's days and hours in
    _mark_open_visits(query, sources, meta)
    if "visitors" in query.metrics or "percentage" in query.metrics:
        meta["visitors"] = sources.visitors_meaning(query.site_id, query.start, query.end)
    if source == "aggregates" and query.dimension is not None and query.dimension.name == "props":
        meta["props"] = PROPS_MEANING
    time_dims = [name for name in query.dimensions if name.startswith("time")]
    labels = _time_labels(query, dimension(time_dims[0]).name) if time_dims else []
    if query.compare is not None:
        rows = _compared(query, rows, sources, labels, time_dims[0] if time_dims else None)
        meta["comparison_date_range"] = (
            [t.isoformat() for t in query.compare_between]
            if query.compare_between
            else [query.compare[0].isoformat(), query.compare[1].isoformat()]
        )
    if query.total_rows:
        meta["total_rows"] = len(rows)
    if query.time_labels and time_dims:
        meta["time_labels"] = labels
    page = rows[query.offset : query.offset + query.limit]
    results = [_result(r, query.metrics) for r in page]
    return Answer(results, meta)


def _with_imports(query: Query, sources: Sources) -> tuple[list[dict[str, Any]], str, dict[str, Any], str]:
    """The log's rows with imported history added where it can answer (:mod:`query.imported`),
    Plausible's ``imports_*`` meta saying whether it was, and what imported visitors count."""
    found = imported.plan(query)
    ranges = imported.range_part(query, sources.imported_ranges(query.site_id, query.start, query.end))
    if not found.table:  # a range import answers fewer questions than the daily tables: none of these
        rows, source = _rows(query, sources)
        return rows, source, imported.imports_meta(found, False, ranges), ""
    rows, source = _rows(imported.native_query(query), sources)
    found_rows = sources.imported(query.site_id, query.start, query.end, found.table)
    daily = imported.filtered_rows(query.filters, found.table, found_rows)
    rows, _ = imported.combined(query, found, rows, daily, ranges.rows)
    return rows, source, imported.imports_meta(found, daily.num_rows > 0, ranges), imported.visitors_method(ranges)


def _mark_open_visits(query: Query, sources: Sources, meta: dict[str, Any]) -> None:
    """Visit figures that count visits still open (:mod:`query.open_visits`) say so: ``open_visits``
    in ``meta``, and each visit metric ``provisional``; a bounce rate, duration or views per visit is
    not exact until they close (a visit's count is: it began, and counts once)."""
    asked = [m for m in query.metrics if m in VISIT_METRICS]
    if not asked:
        return
    still_open = sources.open_visits(query.site_id, query.start, query.end)
    if not still_open:
        return
    meta["open_visits"] = still_open
    for metric in asked:
        info = meta["metrics"][metric]
        info["provisional"] = True
        if metric != "visits":
            info["exact"] = False
            info["method"] = (
                f"{info.get('method', 'counted')}; {still_open} of the visits are still open: their bounce,"
                " duration and page views are provisional until they close"
            )


def _rows(query: Query, sources: Sources) -> tuple[list[dict[str, Any]], str]:
    if is_vitals_query(query):
        return vitals_rows(query, sources)
    if fits_aggregates(query):
        report = sources.aggregate_report(query.site_id, query.start, query.end)
        rows = _aggregate_rows(report, query)
        if query.filters and len(rows) >= MAX_LIMIT:  # the view's list was cut: the filter may want rows past it
            return _exact_rows(query, sources), "raw"
        if query.filters and query.dimension is not None and query.dimension.name != "props":
            kept = matching_values([r["dimensions"][0] for r in rows], query.dimensions[0], query.filters)
            rows = [r for r in rows if r["dimensions"][0] in kept]
        return rows, "aggregates"
    return _exact_rows(query, sources), "raw"


def _exact_rows(query: Query, sources: Sources) -> list[dict[str, Any]]:
    exact = sources.exact(query.site_id)
    return exact.answer(query) if exact is not None else []


def _on_own_dimension(query: Query) -> bool:
    """Filters that name only the query's one (non-time) dimension, and no share of a total: the
    aggregate rows of the values they keep are the answer (top pages under /blog/, sources but direct)."""
    d = query.dimension
    return (
        d is not None
        and d.kind in ("traffic", "visit")
        and "percentage" not in query.metrics
        and set(leaves(query.filters)) == {query.dimensions[0]}
    )


def _event_name(query: Query) -> str | bool | None:
    """The one custom event name a props query is narrowed to, None for every name, False if its
    filters say anything else."""
    if not query.filters:
        return None
    only = query.filters[0]
    if len(query.filters) > 1 or only.op != "is" or only.dimension != "event:name" or len(only.values) != 1:
        return False
    return only.values[0] if only.case_sensitive and only.values[0] != "pageview" else False


def _aggregate_rows(report: Report, query: Query) -> list[dict[str, Any]]:
    d = query.dimension
    if d is None:
        return [_total_row(report, query.metrics)]
    if d.name == "props":
        name = _event_name(query)
        frame = report.props(d.column, MAX_LIMIT, name if isinstance(name, str) else None)
        return [
            {
                "dimensions": [str(r["value"])],
                "metrics": {
                    "visitors": Estimate(float(r["visitors"]), *_bounds(r)),
                    "events": int(r["events"]),
                },
            }
            for r in frame.to_dict("records")
        ]
    if d.kind == "time":
        return _time_rows(report, query, d.name)
    if d.kind == "traffic" and not set(query.metrics) <= set(VISIT_METRICS):
        return _traffic_rows(report, query, d.name)
    return _visit_rows(report, query, d.name)


def _compared(
    query: Query, rows: list[dict[str, Any]], sources: Sources, labels: list[str], time_dim: str | None
) -> list[dict[str, Any]]:
    """Each row with ``comparison``: the same dimensions over the comparison range, its metrics and the change."""
    assert query.compare is not None
    if query.compare_between is not None:  # a date-time range compares with the instants as long before
        first, last = (local_time(t, query.timezone) for t in query.compare_between)
        end_day = (last - dt.timedelta(microseconds=1)).date()
        before = dataclasses.replace(
            query, start=first.date(), end=end_day, between=query.compare_between, compare=None, compare_between=None
        )
    else:
        before = dataclasses.replace(query, start=query.compare[0], end=query.compare[1], between=None, compare=None)
    earlier = {tuple(r["dimensions"]): r["metrics"] for r in _rows(before, sources)[0]}
    position = query.dimensions.index(time_dim) if time_dim else -1
    lookup: dict[str, str] = {}
    if time_dim:  # as Plausible: every bucket gets a row, so that each has its comparison
        lookup = dict(zip(labels, _time_labels(before, dimension(time_dim).name), strict=False))
        present = {r["dimensions"][position] for r in rows}
        if len(query.dimensions) == 1:
            zero = {m: (0 if m in _TIME_METRICS or m == "events" else None) for m in query.metrics}
            rows = sorted(
                [*rows, *({"dimensions": [t], "metrics": dict(zero)} for t in labels if t not in present)],
                key=lambda r: r["dimensions"],
            )
            rows = _ordered(rows, query)
    out = []
    for row in rows:
        dims = list(row["dimensions"])
        if position >= 0:
            dims[position] = lookup.get(dims[position], dims[position])
        values = earlier.get(tuple(dims), {})
        then = [_plain(values.get(m, 0 if m in _COUNTS else None)) for m in query.metrics]
        now = [_plain(row["metrics"][m]) for m in query.metrics]
        change = [_change(m, old, new) for m, old, new in zip(query.metrics, then, now, strict=True)]
        out.append({**row, "comparison": {"dimensions": dims, "metrics": then, "change": change}})
    return out


def _change(metric: str, old: Any, new: Any) -> float | int | None:
    """Plausible's change: points for rates, else a whole percentage (100 from nothing, 0 for nothing to nothing)."""
    if old is None or new is None:
        return None
    if metric in ("bounce_rate", "conversion_rate", "percentage", *VITAL_BAND_METRICS, SCROLL_DEPTH):
        return round(float(new - old), 1) if old > 0 or metric != "bounce_rate" else None
    if old == 0:
        return 100 if new > 0 else 0
    return round(float(new - old) / float(old) * 100)


def _result(row: dict[str, Any], metrics: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {"dimensions": row["dimensions"], "metrics": [_plain(row["metrics"][m]) for m in metrics]}
    if "comparison" in row:
        out["comparison"] = row["comparison"]
    return out


def _plain(value: Any) -> Any:
    return round(value.value) if isinstance(value, Estimate) else value


def _total_row(report: Report, metrics: tuple[str, ...]) -> dict[str, Any]:
    totals = report.totals()
    values: dict[str, Any] = {
        "visitors": totals.visitors,
        "visits": totals.visits,
        "pageviews": totals.pageviews,
        "events": totals.pageviews + totals.events,  # Plausible's events: page views and custom events
        "views_per_visit": _round(totals.views_per_visit, 2),
        "bounce_rate": _round(totals.bounce_rate * 100 if totals.bounce_rate is not None else None, 1),
        "visit_duration": _round(totals.avg_duration_s, 0),
    }
    for kind, digest in (("engagement", totals.engagement_ms), ("load", totals.load_ms)):
        for i, q in enumerate((50, 90, 99)):
            values[f"{kind}_p{q}"] = _round(digest[i], 0) if digest else None
    for metric in metrics:
        if metric not in values:
            raise QueryError("metrics", f"metric {metric!r} needs a dimension")
    return {"dimensions": [], "metrics": {m: values[m] for m in metrics}}


def _time_rows(report: Report, query: Query, grain: str) -> list[dict[str, Any]]:
    allowed = ("visitors", "pageviews", "visits")
    _only(query, allowed, f"a time dimension ({query.dimensions[0]})")
    frame = report.series(grain)
    rows = []
    for record in frame.to_dict("records"):
        if not any(record[m] for m in allowed):
            continue  # as Plausible: buckets without data are left out (include.time_labels lists them all)
        values = {
            "visitors": Estimate(float(record["visitors"]), *_bounds(record)),
            "pageviews": int(record["pageviews"]),
            "visits": int(record["visits"]),
        }
        rows.append(
            {"dimensions": [_time_label(record["time"], grain)], "metrics": {m: values[m] for m in query.metrics}}
        )
    return rows


def _traffic_rows(report: Report, query: Query, name: str) -> list[dict[str, Any]]:
    visit_metrics = [m for m in query.metrics if m in VISIT_METRICS]
    if visit_metrics and name == "page":
        raise QueryError("metrics", f"metric {visit_metrics[0]!r} with dimension 'event:page' is not supported")
    _only(
        query, ("visitors", "pageviews", "events", "percentage", *VISIT_METRICS), f"dimension {query.dimensions[0]!r}"
    )
    top = report.top(name, MAX_LIMIT)
    visits = report.top_visits(name, MAX_LIMIT).set_index("value") if visit_metrics else pd.DataFrame()
    total_visitors = report.totals().visitors.value if "percentage" in query.metrics else 0.0
    rows = []
    for record in top.to_dict("records"):
        value = str(record["value"])
        estimate = Estimate(float(record["visitors"]), *_bounds(record))
        values: dict[str, Any] = {
            "visitors": estimate,
            "pageviews": int(record["pageviews"]),
            "events": int(record["pageviews"]) + int(record["events"]),
            "percentage": _round(100 * estimate.value / total_visitors, 1) if total_visitors else None,
        }
        if visit_metrics:
            visit = visits.loc[value] if value in visits.index else None
            values["visits"] = int(visit["visits"]) if visit is not None else 0
            values["bounce_rate"] = _round(100 * visit["bounce_rate"], 1) if visit is not None else None
            values["visit_duration"] = _round(visit["avg_duration_s"], 0) if visit is not None else None
            values["views_per_visit"] = None
            if "views_per_visit" in query.metrics:
                raise QueryError("metrics", "metric 'views_per_visit' with a dimension is not supported yet")
        rows.append({"dimensions": [value], "metrics": {m: values[m] for m in query.metrics}})
    return rows


def _visit_rows(report: Report, query: Query, name: str) -> list[dict[str, Any]]:
    """Rows of a visit dimension (entry/exit page), or of a visit's source, channel, … when only
    visit metrics are asked: the visits of each value, as the session view counts them."""
    if name == "page":
        raise QueryError("metrics", f"metric {query.metrics[0]!r} with dimension 'event:page' is not supported")
    _only(query, ("visits", "bounce_rate", "visit_duration"), f"dimension {query.dimensions[0]!r}")
    rows = []
    for record in report.top_visits(name, MAX_LIMIT).to_dict("records"):
        values = {
            "visits": int(record["visits"]),
            "bounce_rate": _round(100 * record["bounce_rate"], 1),
            "visit_duration": _round(record["avg_duration_s"], 0),
        }
        rows.append({"dimensions": [str(record["value"])], "metrics": {m: values[m] for m in query.metrics}})
    return rows


def _only(query: Query, allowed: tuple[str, ...], where: str) -> None:
    for metric in query.metrics:
        if metric not in allowed:
            raise QueryError("metrics", f"metric {metric!r} with {where} is not supported yet")


def _ordered(rows: list[dict[str, Any]], query: Query) -> list[dict[str, Any]]:
    """Sorted by ``order_by``, last key first (a stable sort), ties by dimension value ascending."""
    rows = sorted(rows, key=lambda r: r["dimensions"])
    for name, descending in reversed(query.order_by):
        if name in query.dimensions:
            rows.sort(key=functools.partial(_dimension_of, query.dimensions.index(name)), reverse=descending)
        else:
            rows.sort(key=functools.partial(_metric_of, name), reverse=descending)
    return rows


def _dimension_of(position: int, row: dict[str, Any]) -> str:
    return str(row["dimensions"][position])


def _metric_of(name: str, row: dict[str, Any]) -> float:
    return _sort_value(row["metrics"][name])


def _sort_value(value: Any) -> float:
    if isinstance(value, Estimate):
        return value.value
    return -math.inf if value is None else float(value)


def _metric_meta(metric: str, rows: list[dict[str, Any]], source: str) -> dict[str, Any]:
    """Exact, or approximate with the largest 95% relative bound among the rows."""
    if metric in VITALS_METRICS:
        return vitals_metric_meta(metric, source)
    approximate = source == "aggregates" and metric in ("visitors", "percentage", *PERCENTILE_METRICS)
    info: dict[str, Any] = {"exact": not approximate}
    if metric == "visitors" and approximate:
        bounds = [r["metrics"][metric].relative_error for r in rows if isinstance(r["metrics"][metric], Estimate)]
        info["bound_95"] = round(max(bounds, default=0.0), 4)
        info["method"] = "HyperLogLog union of the views' sketches"
    if metric == "percentage" and approximate:
        info["method"] = "≈ visitors of the row / ≈ all visitors (both HyperLogLog estimates)"
    if metric in PERCENTILE_METRICS and approximate:
        info["method"] = "merged t-digests (rank error about 0.5%)"
    if source == "raw":
        info["method"] = "counted from raw events"
    return info


def _bounds(record: Mapping[str, Any]) -> tuple[float, float]:
    value, bound = float(record["visitors"]), float(record.get("visitors_bound") or 0.0)
    return value * (1 - bound), value * (1 + bound)


def _round(value: float | None, digits: int) -> float | int | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return round(value) if digits == 0 else round(float(value), digits)


def _time_label(value: Any, grain: str) -> str:
    return time_label(pd.Timestamp(value).to_pydatetime(), grain, dt.date.min)


def _time_labels(query: Query, grain: str) -> list[str]:
    """Every bucket of the range, as Plausible lists them (weeks by Monday, months by their first day)."""
    labels: list[str] = []
    if grain == "month":
        year, month = query.start.year, query.start.month
        while (year, month) <= (query.end.year, query.end.month):
            labels.append(dt.date(year, month, 1).isoformat())
            year, month = (year + 1, 1) if month == 12 else (year, month + 1)
        return labels
    if grain == "week":
        monday = query.start - dt.timedelta(days=query.start.weekday())
        while monday <= query.end:
            labels.append(max(monday, query.start).isoformat())
            monday += dt.timedelta(days=7)
        return labels
    if grain == "hour" and not is_utc(query.timezone):  # local hours: 23 or 24 distinct across a DST change
        return [
            time_label(b, grain, query.start) for b in buckets(LocalDays(query.start, query.end, query.timezone), grain)
        ]
    at = dt.datetime.combine(query.start, dt.time())
    end = dt.datetime.combine(query.end + dt.timedelta(days=1), dt.time())
    step = dt.timedelta(days=1) if grain == "day" else dt.timedelta(hours=1)
    while at < end:
        labels.append(time_label(at, grain, query.start))
        at += step
    return labels
