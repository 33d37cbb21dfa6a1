"""Plausible's Stats API v2 request body, read into a :class:`query.spec.Query`.

Everything Tally cannot answer yet is refused with a :class:`QueryError` that names the part
(``"metric 'total_revenue' is not supported"``), never answered wrongly. Pure code: no I/O.
The body's shape follows https://plausible.io/docs/stats-api (``site_id``, ``date_range``,
``metrics``, ``dimensions``, ``filters``, ``order_by``, ``include``, ``pagination``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from query.spec import (
    DIMENSIONS,
    MAX_LIMIT,
    MAX_RANGE_DAYS,
    METRICS,
    Filter,
    Query,
    QueryError,
)

RANGE_SHORTCUTS = ("day", "24h", "7d", "28d", "30d", "91d", "month", "6mo", "12mo", "year", "all")
KNOWN_KEYS = ("site_id", "date_range", "metrics", "dimensions", "filters", "order_by", "include", "pagination", "date")
ALL_TIME_START = dt.date(2020, 1, 1)  # "all": Tally refuses events before 2020 (quality.earliest_year)


def parse_query(body: Any, *, today: dt.date) -> Query:
    """Read a v2 request body; ``today`` is the UTC date relative ranges count from."""
    if not isinstance(body, Mapping):
        raise QueryError("body", "the request body must be a JSON object")
    unknown = sorted(set(body) - set(KNOWN_KEYS))
    if unknown:
        raise QueryError(unknown[0], f"key {unknown[0]!r} is not part of a query; known keys: {', '.join(KNOWN_KEYS)}")
    site_id = body.get("site_id")
    if not isinstance(site_id, str) or not site_id:
        raise QueryError("site_id", "site_id is required: the site's id as configured in Tally")
    if "date" in body:
        today = _date(body["date"], "date")
    start, end = parse_date_range(body.get("date_range"), today=today)
    metrics = _metrics(body.get("metrics"))
    dimensions = _dimensions(body.get("dimensions", []))
    filters = tuple(parse_filter(f, f"filters[{i}]") for i, f in enumerate(_list(body.get("filters", []), "filters")))
    order_by = _order_by(body.get("order_by"), metrics, dimensions)
    include = _include(body.get("include", {}))
    limit, offset = _pagination(body.get("pagination", {}))
    if "percentage" in metrics and not dimensions:
        raise QueryError("metrics", "metric 'percentage' needs at least one dimension")
    return Query(
        site_id=site_id,
        start=start,
        end=end,
        metrics=metrics,
        dimensions=dimensions,
        filters=filters,
        order_by=order_by,
        time_labels=include.get("time_labels", False),
        total_rows=include.get("total_rows", False),
        limit=limit,
        offset=offset,
    )


def parse_date_range(value: Any, *, today: dt.date) -> tuple[dt.date, dt.date]:
    """A shortcut (``7d``, ``month``, …) or a pair of ISO dates, as an inclusive pair of UTC dates."""
    if isinstance(value, str):
        if value not in RANGE_SHORTCUTS:
            raise QueryError("date_range", f"date_range {value!r} is not one of {', '.join(RANGE_SHORTCUTS)}")
        return _shortcut(value, today)
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
        raise QueryError("date_range", 'date_range is a shortcut such as "7d" or a pair of ISO dates')
    if any("T" in v for v in value):
        raise QueryError("date_range", "date-time ranges are not supported yet: give a pair of dates (UTC days)")
    start, end = _date(value[0], "date_range[0]"), _date(value[1], "date_range[1]")
    if end < start:
        raise QueryError("date_range", "date_range ends before it starts")
    if (end - start).days >= MAX_RANGE_DAYS:
        raise QueryError("date_range", f"date_range may span at most {MAX_RANGE_DAYS} days")
    return start, end


def _shortcut(name: str, today: dt.date) -> tuple[dt.date, dt.date]:
    if name in ("day", "24h"):
        if name == "24h":  # the last 24 hours need hour edges; UTC days are what the views keep
            raise QueryError("date_range", "date_range '24h' is not supported yet: use 'day' or two dates")
        return today, today
    if name.endswith("d"):
        return today - dt.timedelta(days=int(name[:-1]) - 1), today
    month_start = today.replace(day=1)
    if name == "month":
        return month_start, today
    if name.endswith("mo"):
        months = int(name[:-2])
        year, month = divmod(month_start.year * 12 + month_start.month - 1 - (months - 1), 12)
        return dt.date(year, month + 1, 1), today
    if name == "year":
        return today.replace(month=1, day=1), today
    return max(ALL_TIME_START, today - dt.timedelta(days=MAX_RANGE_DAYS - 1)), today  # "all"


def parse_filter(value: Any, where: str) -> Filter:
    """``[op, dimension, clauses]`` or ``[and|or, [filters]]`` / ``[not, filter]``."""
    if not isinstance(value, list) or not value or not isinstance(value[0], str):
        raise QueryError(where, f'{where} must be a list such as ["is", "event:page", ["/"]]')
    op = value[0]
    if op in ("and", "or"):
        if len(value) != 2:
            raise QueryError(where, f"{where}: {op!r} takes one list of filters")
        parts = _list(value[1], f"{where}[1]")
        if not parts:
            raise QueryError(where, f"{where}: {op!r} needs at least one filter")
        return Filter(op, children=tuple(parse_filter(p, f"{where}[1][{i}]") for i, p in enumerate(parts)))
    if op == "not":
        if len(value) != 2:
            raise QueryError(where, f"{where}: 'not' takes one filter")
        return Filter(op, children=(parse_filter(value[1], f"{where}[1]"),))
    if op not in ("is", "is_not", "contains", "contains_not", "matches", "matches_not"):
        raise QueryError(where, f"filter operator {op!r} is not supported")
    if len(value) not in (3, 4):
        raise QueryError(where, f"{where}: a filter is [operator, dimension, [values]] (and optional modifiers)")
    dimension = value[1]
    if not isinstance(dimension, str) or dimension not in DIMENSIONS or dimension.startswith("time"):
        raise QueryError(where, f"dimension {dimension!r} is not supported in filters")
    clauses = _list(value[2], f"{where}[2]")
    if not clauses or not all(isinstance(c, str) for c in clauses):
        raise QueryError(where, f"{where}: the values to match are a non-empty list of strings")
    case_sensitive = True
    if len(value) == 4:
        modifiers = value[3]
        if not isinstance(modifiers, Mapping) or set(modifiers) - {"case_sensitive"}:
            raise QueryError(where, f'{where}: the only modifier is {{"case_sensitive": false}}')
        if not isinstance(modifiers.get("case_sensitive", True), bool):
            raise QueryError(where, f"{where}: case_sensitive is true or false")
        case_sensitive = modifiers.get("case_sensitive", True)
    return Filter(op, dimension=dimension, values=tuple(clauses), case_sensitive=case_sensitive)


def _metrics(value: Any) -> tuple[str, ...]:
    metrics = _list(value, "metrics")
    if not metrics:
        raise QueryError("metrics", 'metrics is required: a non-empty list such as ["visitors"]')
    for metric in metrics:
        if not isinstance(metric, str) or metric not in METRICS:
            raise QueryError("metrics", f"metric {metric!r} is not supported")
    if len(set(metrics)) != len(metrics):
        raise QueryError("metrics", "a metric is listed twice")
    return tuple(metrics)


def _dimensions(value: Any) -> tuple[str, ...]:
    dimensions = _list(value, "dimensions")
    for dimension in dimensions:
        if not isinstance(dimension, str) or dimension not in DIMENSIONS:
            raise QueryError("dimensions", f"dimension {dimension!r} is not supported")
    if len(dimensions) > 1:
        raise QueryError("dimensions", "more than one dimension in a query is not supported yet")
    return tuple(dimensions)


def _order_by(value: Any, metrics: tuple[str, ...], dimensions: tuple[str, ...]) -> tuple[tuple[str, bool], ...]:
    """``(name, descending)`` pairs; by default the time dimension ascending, else the first metric descending."""
    if value is None:
        if dimensions and dimensions[0].startswith("time"):
            return ((dimensions[0], False),)
        return ((metrics[0], True),)
    pairs = []
    for i, item in enumerate(_list(value, "order_by")):
        if not (isinstance(item, list) and len(item) == 2 and item[1] in ("asc", "desc")):
            raise QueryError("order_by", f'order_by[{i}] is [metric or dimension, "asc" or "desc"]')
        if item[0] not in metrics and item[0] not in dimensions:
            raise QueryError("order_by", f"order_by[{i}]: {item[0]!r} is not among the query's metrics or dimensions")
        pairs.append((str(item[0]), item[1] == "desc"))
    return tuple(pairs)


def _include(value: Any) -> dict[str, bool]:
    if not isinstance(value, Mapping):
        raise QueryError("include", 'include is an object such as {"total_rows": true}')
    for key, flag in value.items():
        if key not in ("time_labels", "total_rows", "imports", "compare"):
            raise QueryError("include", f"include.{key} is not supported")
        if key == "compare" and flag is not None:
            raise QueryError("include", "include.compare is not supported yet")
        if key in ("time_labels", "total_rows", "imports") and not isinstance(flag, bool):
            raise QueryError("include", f"include.{key} is true or false")
    return {k: bool(v) for k, v in value.items() if k in ("time_labels", "total_rows")}


def _pagination(value: Any) -> tuple[int, int]:
    if not isinstance(value, Mapping) or set(value) - {"limit", "offset"}:
        raise QueryError("pagination", 'pagination is {"limit": n, "offset": n}')
    limit, offset = value.get("limit", 10000), value.get("offset", 0)
    for name, number in (("limit", limit), ("offset", offset)):
        if not isinstance(number, int) or isinstance(number, bool) or number < 0:
            raise QueryError("pagination", f"pagination.{name} must be a whole number ≥ 0")
    if not 1 <= limit <= MAX_LIMIT:
        raise QueryError("pagination", f"pagination.limit must be between 1 and {MAX_LIMIT}")
    if offset > 10 * MAX_LIMIT:
        raise QueryError("pagination", f"pagination.offset may be at most {10 * MAX_LIMIT}")
    return limit, offset


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise QueryError(where, f"{where} must be a list")
    return value


def _date(value: Any, where: str) -> dt.date:
    try:
        return dt.date.fromisoformat(str(value))
    except ValueError as e:
        raise QueryError(where, f"{where}: {value!r} is not an ISO date (YYYY-MM-DD)") from e
