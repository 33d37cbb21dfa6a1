"""Plausible's Stats API v2 request body, read into a :class:`query.spec.Query`.

Everything Tally cannot answer yet is refused with a :class:`QueryError` that names the part
(``"metric 'total_revenue' is not supported"``), never answered wrongly. Pure code: no I/O.
The body's shape follows https://plausible.io/docs/stats-api (``site_id``, ``date_range``,
``metrics``, ``dimensions``, ``filters``, ``order_by``, ``include``, ``pagination``).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping
from typing import Any

from query.site_time import UTC, local_midnight, local_time, local_today, zone
from query.spec import (
    COMPARISONS,
    FILTER_OPERATORS,
    GOAL,
    MAX_LIMIT,
    MAX_RANGE_DAYS,
    METRICS,
    Filter,
    Query,
    QueryError,
    check_vitals,
    dimension,
)

RANGE_SHORTCUTS = ("day", "24h", "7d", "28d", "30d", "91d", "month", "6mo", "12mo", "year", "all")
KNOWN_KEYS = ("site_id", "date_range", "metrics", "dimensions", "filters", "order_by", "include", "pagination", "date")
ALL_TIME_START = dt.date(2020, 1, 1)
EARLIEST_DAY, LATEST_DAY = dt.date(2000, 1, 1), dt.date(9000, 12, 31)
MAX_DIMENSIONS = 4  # each one multiplies the rows; Plausible's own queries rarely use more than two
MAX_FILTER_VALUES = 100
MAX_FILTER_DEPTH = 16  # and/or/not nested deeper than this is refused (450 levels once answered 500)
MAX_FILTER_TEXT = 1000  # "all": Tally refuses events before 2020 (quality.earliest_year)


def parse_site_query(body: Any, *, now: dt.datetime, timezone_of: Callable[[str], str]) -> Query:
    """Read a v2 request body at the instant ``now``, its dates read as the days of the site's own
    zone (``timezone_of(site_id)``: ``sites[].timezone``): what the API and the MCP server answer."""
    site_id = body.get("site_id") if isinstance(body, Mapping) else None
    timezone = timezone_of(site_id) if isinstance(site_id, str) and site_id else UTC
    return parse_query(body, today=local_today(timezone, now), timezone=timezone)


def parse_query(body: Any, *, today: dt.date, now: dt.datetime | None = None, timezone: str = UTC) -> Query:
    """Read a v2 request body; ``today`` is the site's local date relative ranges count from (and
    ``now`` the instant ``24h`` ends at: the end of ``today`` unless given). Dates are the site's
    days in ``timezone`` (:mod:`query.site_time`); a date-time without an offset is its wall clock."""
    if not isinstance(body, Mapping):
        raise QueryError("body", "the request body must be a JSON object")
    try:
        json.dumps(body, ensure_ascii=False, allow_nan=False).encode()
    except (UnicodeEncodeError, ValueError, RecursionError) as e:  # a lone surrogate ("\\ud800"), NaN
        raise QueryError("body", "the body holds text that is not valid Unicode, or NaN/Infinity") from e
    unknown = sorted(set(body) - set(KNOWN_KEYS))
    if unknown:
        raise QueryError(unknown[0], f"key {unknown[0]!r} is not part of a query; known keys: {', '.join(KNOWN_KEYS)}")
    site_id = body.get("site_id")
    if not isinstance(site_id, str) or not site_id:
        raise QueryError("site_id", "site_id is required: the site's id as configured in Tally")
    if "date" in body:
        today = _date(body["date"], "date")
    between = parse_time_range(body.get("date_range"), now=now or _end_of(today, timezone), timezone=timezone)
    if between is not None:
        first, last = (local_time(t, timezone) for t in (between[0], between[1] - dt.timedelta(microseconds=1)))
        start, end = first.date(), last.date()
    else:
        start, end = parse_date_range(body.get("date_range"), today=today)
    metrics = _metrics(body.get("metrics"))
    dimensions = _dimensions(body.get("dimensions", []))
    filters = tuple(parse_filter(f, f"filters[{i}]") for i, f in enumerate(_list(body.get("filters", []), "filters")))
    order_by = _order_by(body.get("order_by"), metrics, dimensions)
    include = _include(body.get("include", {}))
    limit, offset = _pagination(body.get("pagination", {}))
    if "percentage" in metrics and not dimensions:
        raise QueryError("metrics", "metric 'percentage' needs at least one dimension")
    if "conversion_rate" in metrics and GOAL not in dimensions and not _mentions_goal(filters):
        raise QueryError("metrics", "metric 'conversion_rate' needs an event:goal dimension or an event:goal filter")
    check_vitals(metrics, dimensions, filters)
    return Query(
        site_id=site_id,
        start=start,
        end=end,
        between=between,
        metrics=metrics,
        dimensions=dimensions,
        filters=filters,
        order_by=order_by,
        time_labels=bool(include.get("time_labels", False)),
        total_rows=bool(include.get("total_rows", False)),
        imports=bool(include.get("imports", False)),
        compare=_comparison(include.get("compare"), start, end),
        compare_between=_shifted(include.get("compare"), between),
        limit=limit,
        offset=offset,
        timezone=timezone,
    )


def parse_date_range(value: Any, *, today: dt.date) -> tuple[dt.date, dt.date]:
    """A shortcut (``7d``, ``month``, …) or a pair of ISO dates, as an inclusive pair of UTC dates."""
    if isinstance(value, str):
        if value not in RANGE_SHORTCUTS:
            raise QueryError("date_range", f"date_range {value!r} is not one of {', '.join(RANGE_SHORTCUTS)}")
        return _shortcut(value, today)
    if not (isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)):
        raise QueryError("date_range", 'date_range is a shortcut such as "7d" or a pair of ISO dates')
    start, end = _date(value[0], "date_range[0]"), _date(value[1], "date_range[1]")
    if end < start:
        raise QueryError("date_range", "date_range ends before it starts")
    if (end - start).days >= MAX_RANGE_DAYS:
        raise QueryError("date_range", f"date_range may span at most {MAX_RANGE_DAYS} days")
    return start, end


def parse_time_range(value: Any, *, now: dt.datetime, timezone: str = UTC) -> tuple[dt.datetime, dt.datetime] | None:
    """``24h`` or a pair of ISO date-times (``2024-01-01 12:00:00`` or ``…T12:00:00Z``) as a half-open
    UTC interval; the second is inclusive to the second, as in Plausible's docs (``…15:59:59``). A
    date-time without an offset is read in the site's ``timezone``. None for a range of whole days."""
    if value == "24h":
        return now - dt.timedelta(hours=24), now
    if not (isinstance(value, list) and len(value) == 2 and all(_is_instant(v) for v in value)):
        if isinstance(value, list) and any(_is_instant(v) for v in value):
            raise QueryError("date_range", "date_range is two dates or two date-times, not one of each")
        return None
    first, last = (_instant(v, f"date_range[{i}]", timezone) for i, v in enumerate(value))
    last += dt.timedelta(seconds=1) if last.microsecond == 0 else dt.timedelta(microseconds=1)
    if last <= first:
        raise QueryError("date_range", "date_range ends before it starts")
    if (last - first).days >= MAX_RANGE_DAYS:
        raise QueryError("date_range", f"date_range may span at most {MAX_RANGE_DAYS} days")
    return first, last


def _is_instant(value: Any) -> bool:
    return isinstance(value, str) and len(value) > 10 and value[10] in "T "


def _instant(value: str, where: str, timezone: str) -> dt.datetime:
    try:
        instant = dt.datetime.fromisoformat(value)
    except ValueError as e:
        raise QueryError(where, f"{where}: {value!r} is not an ISO date-time (2026-01-31T12:00:00Z)") from e
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=zone(timezone))  # as Plausible: a time without an offset is in the site's zone
    if not EARLIEST_DAY.year <= instant.year <= LATEST_DAY.year:
        raise QueryError(where, f"{where}: {value!r} is out of range")
    return instant.astimezone(dt.UTC)


def _end_of(day: dt.date, timezone: str) -> dt.datetime:
    return local_midnight(day + dt.timedelta(days=1), timezone)


def _shortcut(name: str, today: dt.date) -> tuple[dt.date, dt.date]:
    if name in ("day", "24h"):  # 24h as days: the two dates it touches (parse_time_range has the instants)
        return (today - dt.timedelta(days=1) if name == "24h" else today), today
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


def parse_filter(value: Any, where: str, depth: int = 1) -> Filter:
    """``[op, dimension, clauses]`` or ``[and|or, [filters]]`` / ``[not, filter]``, nested at most
    :data:`MAX_FILTER_DEPTH` deep (each level is SQL and Python recursion; no real question needs more)."""
    if not isinstance(value, list) or not value or not isinstance(value[0], str):
        raise QueryError(where, f'{where} must be a list such as ["is", "event:page", ["/"]]')
    op = value[0]
    if op in ("and", "or", "not") and depth >= MAX_FILTER_DEPTH:
        raise QueryError(where, f"{where}: filters may nest at most {MAX_FILTER_DEPTH} deep (and, or, not)")
    if op in ("and", "or"):
        if len(value) != 2:
            raise QueryError(where, f"{where}: {op!r} takes one list of filters")
        parts = _list(value[1], f"{where}[1]")
        if not parts:
            raise QueryError(where, f"{where}: {op!r} needs at least one filter")
        return Filter(op, children=tuple(parse_filter(p, f"{where}[1][{i}]", depth + 1) for i, p in enumerate(parts)))
    if op == "not":
        if len(value) != 2:
            raise QueryError(where, f"{where}: 'not' takes one filter")
        return Filter(op, children=(parse_filter(value[1], f"{where}[1]", depth + 1),))
    if op not in FILTER_OPERATORS:
        raise QueryError(where, f"filter operator {op!r} is not supported")
    if len(value) not in (3, 4):
        raise QueryError(where, f"{where}: a filter is [operator, dimension, [values]] (and optional modifiers)")
    name = value[1]
    if not isinstance(name, str) or not _known(name) or name.startswith("time"):
        raise QueryError(where, f"dimension {name!r} is not supported in filters")
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
    if len(clauses) > MAX_FILTER_VALUES or any(len(c) > MAX_FILTER_TEXT for c in clauses):
        raise QueryError(where, f"{where}: at most {MAX_FILTER_VALUES} values of at most {MAX_FILTER_TEXT} characters")
    return Filter(op, dimension=name, values=tuple(clauses), case_sensitive=case_sensitive)


def _known(name: str) -> bool:
    try:
        dimension(name)
    except KeyError:
        return False
    return True


def _mentions_goal(filters: tuple[Filter, ...]) -> bool:
    return any(f.dimension == GOAL or _mentions_goal(f.children) for f in filters)


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
    for name in dimensions:
        if not isinstance(name, str) or not _known(name):
            raise QueryError("dimensions", f"dimension {name!r} is not supported")
    if len(set(dimensions)) != len(dimensions):
        raise QueryError("dimensions", "a dimension is listed twice")
    if sum(1 for name in dimensions if name.startswith("time")) > 1:
        raise QueryError("dimensions", "at most one time dimension")
    if len(dimensions) > MAX_DIMENSIONS:
        raise QueryError("dimensions", f"at most {MAX_DIMENSIONS} dimensions")
    return tuple(dimensions)


def _order_by(value: Any, metrics: tuple[str, ...], dimensions: tuple[str, ...]) -> tuple[tuple[str, bool], ...]:
    """``(name, descending)`` pairs; by default the time dimension ascending, else the first metric descending."""
    if value is None:
        times = [name for name in dimensions if name.startswith("time")]
        return ((times[0], False), (metrics[0], True)) if times else ((metrics[0], True),)
    pairs = []
    for i, item in enumerate(_list(value, "order_by")):
        if not (isinstance(item, list) and len(item) == 2 and item[1] in ("asc", "desc")):
            raise QueryError("order_by", f'order_by[{i}] is [metric or dimension, "asc" or "desc"]')
        if item[0] not in metrics and item[0] not in dimensions:
            raise QueryError("order_by", f"order_by[{i}]: {item[0]!r} is not among the query's metrics or dimensions")
        pairs.append((str(item[0]), item[1] == "desc"))
    return tuple(pairs)


def _include(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise QueryError("include", 'include is an object such as {"total_rows": true}')
    for key, flag in value.items():
        if key not in ("time_labels", "total_rows", "imports", "compare"):
            raise QueryError("include", f"include.{key} is not supported")
        if key in ("time_labels", "total_rows", "imports") and not isinstance(flag, bool):
            raise QueryError("include", f"include.{key} is true or false")
    return dict(value)


def _comparison(value: Any, start: dt.date, end: dt.date) -> tuple[dt.date, dt.date] | None:
    """``previous_period`` (as long, just before), ``year_over_year`` (the same dates a year
    earlier) or a pair of ISO dates; None when no comparison is asked for."""
    if value is None:
        return None
    if value == "previous_period":
        length = end - start + dt.timedelta(days=1)
        return start - length, end - length  # for a date-time range, the days its shifted instants touch
    if value == "year_over_year":
        return _year_before(start), _year_before(end)
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value):
        first, last = _date(value[0], "include.compare[0]"), _date(value[1], "include.compare[1]")
        if last < first or (last - first).days >= MAX_RANGE_DAYS:
            raise QueryError("include", f"include.compare: a range of at most {MAX_RANGE_DAYS} days, start first")
        return first, last
    raise QueryError("include", f"include.compare is {', '.join(COMPARISONS)} or a pair of ISO dates")


def _shifted(value: Any, between: tuple[dt.datetime, dt.datetime] | None) -> tuple[dt.datetime, dt.datetime] | None:
    """The comparison of a date-time range: as long, just before, or a year earlier (None for days)."""
    if between is None or value not in COMPARISONS:
        return None
    first, last = between
    if value == "previous_period":
        return first - (last - first), first
    return (
        dt.datetime.combine(_year_before(first.date()), first.timetz()),
        dt.datetime.combine(_year_before(last.date()), last.timetz()),
    )


def _year_before(day: dt.date) -> dt.date:
    return day.replace(year=day.year - 1, day=28) if (day.month, day.day) == (2, 29) else day.replace(year=day.year - 1)


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
        day = dt.date.fromisoformat(str(value))
    except ValueError as e:
        raise QueryError(where, f"{where}: {value!r} is not an ISO date (YYYY-MM-DD)") from e
    if not EARLIEST_DAY <= day <= LATEST_DAY:  # room for a year's comparison and week edges either side
        raise QueryError(where, f"{where}: {value!r} is out of range ({EARLIEST_DAY} to {LATEST_DAY})")
    return day
