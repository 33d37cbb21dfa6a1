"""Answer a :class:`query.spec.Query` through a :class:`query.report.Report`.

The aggregate tables answer a query without filters; a query with filters is answered from
``raw.pageviews`` (exact), because a view row holds one dimension only. Either way the figures
come from the same report methods the dashboard's panels call, so no figure is computed two
ways. ``meta`` says which source answered and, per metric, whether it is exact or approximate
with its 95% bound.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from query.report import Report
from query.spec import (
    MAX_LIMIT,
    PERCENTILE_METRICS,
    RAW_FILTERS,
    VISIT_METRICS,
    Filter,
    Query,
    QueryError,
)
from tally.sketches import Estimate

VISITORS_MEANING = (
    "daily visitor ids: a visitor's id changes every UTC day, so someone who came on 3 days of the range counts 3 times"
)
# Reports by source: "aggregates" (no filters) or "raw" (the filters, as the dashboard's drill-down takes them).
ReportFor = Callable[[Mapping[str, str]], Report]


@dataclass(frozen=True)
class Answer:
    """The rows of a query and what they mean."""

    results: list[dict[str, Any]]
    meta: dict[str, Any]


def raw_filters(filters: tuple[Filter, ...]) -> dict[str, str]:
    """The filters as the raw drill-down takes them (one value per dimension, all of them to hold);
    anything else is refused by name."""
    flat: list[Filter] = []
    pending = list(filters)
    while pending:
        f = pending.pop(0)
        if f.op == "and":
            pending[:0] = f.children
        else:
            flat.append(f)
    chosen: dict[str, str] = {}
    for f in flat:
        if f.op != "is" or len(f.values) != 1 or not f.case_sensitive:
            raise QueryError(
                "filters", f"filter {f.op!r} is not supported yet: only 'is' with one value, combined by 'and'"
            )
        if f.dimension not in RAW_FILTERS:
            raise QueryError("filters", f"a filter on {f.dimension!r} is not supported yet")
        key = RAW_FILTERS[f.dimension]
        if key in chosen and chosen[key] != f.values[0]:
            raise QueryError("filters", f"two different values of {f.dimension!r} can never both hold")
        chosen[key] = f.values[0]
    return chosen


def run(query: Query, report_for: ReportFor) -> Answer:
    """Answer ``query``; raises :class:`QueryError` for a combination Tally cannot answer yet."""
    filters = raw_filters(query.filters)
    report = report_for(filters)
    dimension = query.dimension
    if dimension is None:
        rows = [_total_row(report, query.metrics)]
    elif dimension.kind == "time":
        rows = _time_rows(report, query, dimension.name)
    elif dimension.kind == "traffic" and not set(query.metrics) <= set(VISIT_METRICS):
        rows = _traffic_rows(report, query, dimension.name)
    else:
        rows = _visit_rows(report, query, dimension.name)
    rows = _ordered(rows, query)
    meta: dict[str, Any] = {"source": "raw" if report.exact is True else "aggregates", "metrics": {}}
    for metric in query.metrics:
        meta["metrics"][metric] = _metric_meta(metric, rows, exact=report.exact)
    if "visitors" in query.metrics or "percentage" in query.metrics:
        meta["visitors"] = VISITORS_MEANING
    if query.total_rows:
        meta["total_rows"] = len(rows)
    if query.time_labels and dimension is not None and dimension.kind == "time":
        meta["time_labels"] = _time_labels(query, dimension.name)
    page = rows[query.offset : query.offset + query.limit]
    results = [{"dimensions": r["dimensions"], "metrics": [r["metrics"][m] for m in query.metrics]} for r in page]
    return Answer(results, meta)


def _total_row(report: Report, metrics: tuple[str, ...]) -> dict[str, Any]:
    totals = report.totals()
    values: dict[str, Any] = {
        "visitors": totals.visitors,
        "visits": totals.visits,
        "pageviews": totals.pageviews,
        "events": totals.events,
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
            "events": int(record["events"]),
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
            rows.sort(key=lambda r: r["dimensions"][0], reverse=descending)
        else:
            rows.sort(key=functools.partial(_metric_of, name), reverse=descending)
    return rows


def _metric_of(name: str, row: dict[str, Any]) -> float:
    return _sort_value(row["metrics"][name])


def _sort_value(value: Any) -> float:
    if isinstance(value, Estimate):
        return value.value
    return -math.inf if value is None else float(value)


def _metric_meta(metric: str, rows: list[dict[str, Any]], *, exact: bool) -> dict[str, Any]:
    """Exact, or approximate with the largest 95% relative bound among the rows; and the values become plain numbers."""
    approximate = not exact and metric in ("visitors", "percentage", *PERCENTILE_METRICS)
    info: dict[str, Any] = {"exact": not approximate}
    if metric == "visitors" and approximate:
        bounds = [r["metrics"][metric].relative_error for r in rows if isinstance(r["metrics"][metric], Estimate)]
        info["bound_95"] = round(max(bounds, default=0.0), 4)
        info["method"] = "HyperLogLog union of the views' sketches"
    if metric in PERCENTILE_METRICS and approximate:
        info["method"] = "merged t-digests (rank error about 0.5%)"
    for row in rows:
        value = row["metrics"][metric]
        if isinstance(value, Estimate):
            row["metrics"][metric] = round(value.value)
    return info


def _bounds(record: Mapping[str, Any]) -> tuple[float, float]:
    value, bound = float(record["visitors"]), float(record.get("visitors_bound") or 0.0)
    return value * (1 - bound), value * (1 + bound)


def _round(value: float | None, digits: int) -> float | int | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return round(value) if digits == 0 else round(float(value), digits)


def _time_label(value: Any, grain: str) -> str:
    stamp = pd.Timestamp(value)
    return str(stamp.strftime("%Y-%m-%d" if grain == "day" else "%Y-%m-%dT%H:00:00Z"))


def _time_labels(query: Query, grain: str) -> list[str]:
    start = dt.datetime.combine(query.start, dt.time(), dt.UTC)
    end = dt.datetime.combine(query.end + dt.timedelta(days=1), dt.time(), dt.UTC)
    step = dt.timedelta(days=1) if grain == "day" else dt.timedelta(hours=1)
    labels, at = [], start
    while at < end:
        labels.append(_time_label(at, grain))
        at += step
    return labels
