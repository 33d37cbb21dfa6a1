"""Imported history (``imported.daily`` and ``imported.ranges``, written by ``tally import``) added to
an answer when the question asks for it (``include: {"imports": true}``, as Plausible's Stats API),
and only where the imported tables can answer it; ``meta`` says which (Plausible's
``imports_included``, ``imports_skip_reason`` and ``imports_warning``).

An imported figure is combined with the log's as Plausible combines them: counts are added; a
bounce rate, visit duration or views per visit is the average over the log's visits and the
imported ones together (an export's ``bounces`` and ``visit_duration`` are sums). Imported visitors
are each day's unique visitors added up across days and rows, as Plausible adds them, so a visitor
of two imported days counts twice: ``meta`` marks visitors approximate when imports are included.
The import keeps only days before the site's own first event (``imports/store.py``), so no day is
counted from both.

A range import (Umami's export) has no days: each value's visitors (or, for custom events, events)
over the range the export was asked for. It answers one breakdown of those figures, without
filters, time or comparison, and only a question whose dates hold its whole range
(``out_of_range`` otherwise, as Plausible says of dates its imports do not cover).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from query.spec import Filter, Query
from tally.dimensions import NONE_VALUE
from tally.sketches import Estimate
from tally.umami_export import EVENTS_FILE

# Plausible's reasons, in its words.
UNSUPPORTED = "unsupported_query"
NO_IMPORTED_DATA = "no_imported_data"
OUT_OF_RANGE = "out_of_range"
# An API dimension -> the export table that breaks its rows down and that table's column.
DIMENSION_TABLES: dict[str | None, tuple[str, str | None]] = {
    None: ("visitors", None),
    "time:day": ("visitors", "date"),
    "time": ("visitors", "date"),
    "event:page": ("pages", "page"),
    "visit:source": ("sources", "source"),
    "visit:entry_page": ("entry_pages", "entry_page"),
    "visit:exit_page": ("exit_pages", "exit_page"),
    "visit:country": ("locations", "country"),
    "visit:region": ("locations", "region"),
    "visit:device": ("devices", "device"),
    "visit:browser": ("browsers", "browser"),
    "visit:os": ("operating_systems", "operating_system"),
    "event:name": ("custom_events", "name"),
}
# The metrics each export table answers. Pages have no bounces or durations, custom events no visits.
_SESSION = ("visitors", "visits", "pageviews", "events", "bounce_rate", "visit_duration", "views_per_visit")
TABLE_METRICS = {
    **{table: _SESSION for table, _ in DIMENSION_TABLES.values()},
    # The visitors table's page views are the day's, not its visits': no views per visit from it.
    "visitors": tuple(m for m in _SESSION if m != "views_per_visit"),
    "pages": ("visitors", "visits", "pageviews", "events"),
    "custom_events": ("visitors", "events"),
}
# The column that counts a table's visits: entry pages count entrances, exit pages exits.
_VISITS_COLUMN = {"entry_pages": "entrances", "exit_pages": "exits"}
# An API dimension -> the file of a range import (imported.ranges: Umami's export) that breaks it down.
# A referrer's row is Umami's referrer domain (google.com), not a source's name (Google).
RANGE_TABLES = {
    "event:page": "pages",
    "visit:source": "referrers",
    "visit:browser": "browsers",
    "visit:os": "os",
    "visit:device": "devices",
    "visit:country": "countries",
    "event:name": EVENTS_FILE,
}
_RANGE_ANSWERS = (
    "an imported range (Umami's export) has no days and no totals: it answers a breakdown by one of"
    f" {', '.join(RANGE_TABLES)} of visitors (of events, by event:name), without filters, time or comparison"
)
IMPORTED_VISITORS = (
    "the log's visitors plus imported visitors, which are each imported day's unique visitors added up"
    " (as Plausible adds them): a visitor of two imported days counts twice"
)
RANGE_VISITORS = (
    "; an imported range's visitors are Umami's sessions over its whole range, whose ids Umami salts anew"
    " each month: over a range of more than a month a visitor counts once a month"
)
_RATES = ("bounce_rate", "visit_duration", "views_per_visit")
_SUMS = ("visitors", "visits", "pageviews", "events", "bounces", "seconds")


@dataclasses.dataclass(frozen=True)
class Plan:
    """Whether a query can include imports: its export table and column, or why not."""

    table: str = ""
    column: str | None = None
    skip_reason: str = ""
    warning: str = ""


def plan(query: Query) -> Plan:
    """The export table that answers ``query``'s imported part, or the reason none can."""
    asked = query.dimensions[0] if query.dimensions else None
    if len(query.dimensions) > 1 or asked not in DIMENSION_TABLES:
        names = ", ".join(d for d in DIMENSION_TABLES if d)
        return Plan(skip_reason=UNSUPPORTED, warning=f"imported history breaks down by one of {names}, or none")
    if query.compare is not None or query.between is not None:
        return Plan(skip_reason=UNSUPPORTED, warning="imported history answers whole days without a comparison")
    table, column = DIMENSION_TABLES[asked]
    if query.filters:
        filtered, why = filter_table(query.filters, table if asked not in (None, "time", "time:day") else None)
        if filtered is None:
            return Plan(skip_reason=UNSUPPORTED, warning=why)
        table = filtered
    missing = [m for m in query.metrics if m not in TABLE_METRICS[table]]
    if missing:
        answered = ", ".join(TABLE_METRICS[table])
        warning = f"imported {table} rows have no {', '.join(missing)} (they answer {answered})"
        return Plan(skip_reason=UNSUPPORTED, warning=warning)
    return Plan(table, column)


# The API dimensions each export table holds, as a filter reads them, and the table's column.
FILTER_COLUMNS: dict[str, dict[str, str]] = {
    "sources": {
        "visit:source": "source",
        "visit:referrer": "referrer",
        **{f"visit:utm_{part}": f"utm_{part}" for part in ("source", "medium", "campaign", "content", "term")},
    },
    "pages": {"event:hostname": "hostname", "event:page": "page"},
    "entry_pages": {"visit:entry_page": "entry_page"},
    "exit_pages": {"visit:exit_page": "exit_page"},
    "custom_events": {"event:name": "name"},
    "locations": {"visit:country": "country", "visit:region": "region"},
    "devices": {"visit:device": "device"},
    "browsers": {"visit:browser": "browser"},
    "operating_systems": {"visit:os": "operating_system"},
}


def filter_table(filters: tuple[Filter, ...], table: str | None) -> tuple[str | None, str]:
    """The export table whose rows the filters can be applied to: ``table`` (the breakdown's), or
    without a breakdown the one table that holds every dimension they name; else None and why not."""
    named = sorted({leaf.dimension for f in filters for leaf in _leaves(f)})
    holding = [t for t, columns in FILTER_COLUMNS.items() if all(d in columns for d in named)]
    if table is not None and table in holding:
        return table, ""
    if table is None and holding:
        return holding[0], ""
    where = f"imported {table} rows do not" if table is not None else "no one imported table does"
    return None, f"{where} hold every dimension the filters name ({', '.join(named)})"


def _leaves(f: Filter) -> list[Filter]:
    return [leaf for child in f.children for leaf in _leaves(child)] if f.op in ("and", "or", "not") else [f]


def filtered_rows(filters: tuple[Filter, ...], table: str, rows: pa.Table) -> pa.Table:
    """The export table's rows the filters keep, matched as the log's events are (:mod:`query.exact`:
    an unknown value, the export's "", is "(none)"; ``matches`` is RE2, as DuckDB's)."""
    if not filters or rows.num_rows == 0:
        return rows
    keep = _mask(filters[0], table, rows)
    for more in filters[1:]:
        keep = pc.and_(keep, _mask(more, table, rows))
    return rows.filter(keep)


def _mask(f: Filter, table: str, rows: pa.Table) -> pa.ChunkedArray:
    if f.op in ("and", "or"):
        masks = [_mask(c, table, rows) for c in f.children]
        combine = pc.and_ if f.op == "and" else pc.or_
        found = masks[0]
        for m in masks[1:]:
            found = combine(found, m)
        return found
    if f.op == "not":
        return pc.invert(_mask(f.children[0], table, rows))
    column = rows.column(FILTER_COLUMNS[table][f.dimension])
    value = pc.if_else(pc.or_kleene(pc.is_null(column), pc.equal(column, "")), NONE_VALUE, column)
    op = f.op.removesuffix("_not")
    ignore = not f.case_sensitive
    hits = [_matching(value, op, v, ignore) for v in f.values] or [pc.equal(value, value)]
    found = hits[0]
    for h in hits[1:]:
        found = pc.or_(found, h)
    return pc.invert(found) if f.op.endswith("_not") else found


def _matching(value: pa.ChunkedArray, op: str, pattern: str, ignore_case: bool) -> pa.ChunkedArray:
    if op == "matches":
        return pc.match_substring_regex(value, pattern, ignore_case=ignore_case)
    if op == "contains":
        return pc.match_substring(value, pattern, ignore_case=ignore_case)
    if ignore_case:
        return pc.equal(pc.utf8_lower(value), pattern.lower())
    return pc.equal(value, pattern)


def range_plan(query: Query) -> Plan:
    """The file of a range import that answers ``query``, or the reason none can."""
    asked = query.dimensions[0] if len(query.dimensions) == 1 else None
    if query.filters or query.compare is not None or query.between is not None or asked not in RANGE_TABLES:
        return Plan(skip_reason=UNSUPPORTED, warning=_RANGE_ANSWERS)
    table = RANGE_TABLES[asked]
    answered = ("events",) if table == EVENTS_FILE else ("visitors",)
    missing = [m for m in query.metrics if m not in answered]
    if missing:
        warning = f"an imported range's {table} (Umami's {table}.csv) has no {', '.join(missing)}: only {answered[0]}"
        return Plan(skip_reason=UNSUPPORTED, warning=warning)
    return Plan(table, "value")


@dataclasses.dataclass(frozen=True)
class RangePart:
    """What the range imports a question's dates meet give its answer: their rows it adds, and why
    the others are left out."""

    rows: pa.Table
    skip_reason: str = ""
    warning: str = ""


def range_part(query: Query, found: pa.Table) -> RangePart:
    """``found``, the site's range rows whose range meets the query's dates, split into the rows the
    answer adds (of the imports its dates hold whole) and the reason for the others."""
    if found.num_rows == 0:
        return RangePart(found)
    wanted = range_plan(query)
    if not wanted.table:
        return RangePart(found.slice(0, 0), wanted.skip_reason, wanted.warning)
    whole = _within(found, query.start, query.end)
    rows = found.filter(pc.and_(whole, pc.equal(found.column("table_name"), wanted.table)))
    cut = found.filter(pc.invert(whole)).select(["first_date", "last_date"]).to_pylist()
    if not cut:
        return RangePart(rows)
    spans = ", ".join(f"{a} to {b}" for a, b in sorted({(r["first_date"], r["last_date"]) for r in cut}))
    warning = (
        "an imported range (Umami's export has no days) is added only to a question whose dates hold all of it;"
        f" left out: {spans}"
    )
    return RangePart(rows, OUT_OF_RANGE, warning)


def imports_meta(daily: Plan, daily_included: bool, ranges: RangePart) -> dict[str, Any]:
    """Plausible's ``imports_*`` keys: included when either kind of import added rows (a warning then
    says which range imports were left out), else the reason: the daily tables' first."""
    if daily_included or ranges.rows.num_rows:
        return {"imports_included": True} | ({"imports_warning": ranges.warning} if ranges.warning else {})
    found: dict[str, Any] = {
        "imports_included": False,
        "imports_skip_reason": daily.skip_reason or ranges.skip_reason or NO_IMPORTED_DATA,
    }
    warnings = [w for w in dict.fromkeys((daily.warning, ranges.warning)) if w]
    return found | ({"imports_warning": "; ".join(warnings)} if warnings else {})


def visitors_method(ranges: RangePart) -> str:
    """What imported visitors count, as ``meta.metrics.visitors.method`` says it."""
    return IMPORTED_VISITORS + (RANGE_VISITORS if ranges.rows.num_rows else "")


def native_query(query: Query) -> Query:
    """The query the log answers when imports are added: with the visits (and page views) that
    weight a rate, so that the combined rate is the average over both."""
    needed = list(query.metrics)
    if any(m in _RATES for m in needed) and "visits" not in needed:
        needed.append("visits")
    if "views_per_visit" in needed and "pageviews" not in needed:
        needed.append("pageviews")
    return dataclasses.replace(query, metrics=tuple(needed))


def combined(
    query: Query, found: Plan, rows: list[dict[str, Any]], imported: pa.Table, ranges: pa.Table | None = None
) -> tuple[list[dict[str, Any]], bool]:
    """The log's ``rows`` (of :func:`native_query`) with the imported rows added (the daily tables'
    ``imported``, and the range imports' ``ranges`` of :func:`range_part`); True when any was."""
    if imported.num_rows == 0 and (ranges is None or ranges.num_rows == 0):
        return rows, False
    totals = _imported_totals(found, imported)
    for value, figures in (_range_totals(ranges) if ranges is not None else {}).items():
        sums = totals.setdefault(value, dict.fromkeys(_SUMS, 0))
        for metric, figure in figures.items():
            sums[metric] += figure
    by_value = {tuple(r["dimensions"]): r for r in rows}
    for value, figures in totals.items():
        key = (value,) if found.column is not None else ()
        row = by_value.get(key)
        if row is None:
            row = {"dimensions": list(key), "metrics": dict.fromkeys(native_query(query).metrics, 0)}
            row["metrics"].update(dict.fromkeys((m for m in _RATES if m in row["metrics"]), None))
            rows.append(row)
            by_value[key] = row
        _add(row["metrics"], figures)
    return rows, True


def _imported_totals(found: Plan, imported: pa.Table) -> dict[Any, dict[str, int]]:
    """Sums of the imported rows, by the dimension's value (one group without a dimension)."""
    visits = _VISITS_COLUMN.get(found.table, "visits")
    events = "events" if found.table == "custom_events" else "pageviews"
    totals: dict[Any, dict[str, int]] = {}
    for r in imported.to_pylist():
        value = r[found.column] if found.column else None
        if found.column == "date" and value is not None:
            value = value.isoformat()
        elif found.column and not value:
            value = NONE_VALUE  # the export's "" is unknown (direct, for a source): the log's rows say "(none)"
        sums = totals.setdefault(value, dict.fromkeys(_SUMS, 0))
        sums["visitors"] += r["visitors"]
        sums["visits"] += r[visits]
        sums["pageviews"] += r["pageviews"] if found.table != "custom_events" else 0
        sums["events"] += r[events]
        sums["bounces"] += r["bounces"]
        sums["seconds"] += r["visit_duration"]
    return totals


def _range_totals(ranges: pa.Table) -> dict[Any, dict[str, int]]:
    """A range import's rows summed by value ("" as "(none)": a custom event Umami has no name of)."""
    totals: dict[Any, dict[str, int]] = {}
    for r in ranges.select(["value", "visitors", "events"]).to_pylist():
        sums = totals.setdefault(r["value"] or NONE_VALUE, dict.fromkeys(_SUMS, 0))
        sums["visitors"] += r["visitors"] or 0
        sums["events"] += r["events"] or 0
    return totals


def _add(metrics: dict[str, Any], imported: dict[str, int]) -> None:
    """One row's figures from the log with the imported ones of the same row added."""
    visits = _number(metrics.get("visits"))
    both = visits + imported["visits"]
    if "bounce_rate" in metrics:
        bounces = (_number(metrics["bounce_rate"]) / 100) * visits + imported["bounces"]
        metrics["bounce_rate"] = round(100 * bounces / both, 1) if both else None
    if "visit_duration" in metrics:
        seconds = _number(metrics["visit_duration"]) * visits + imported["seconds"]
        metrics["visit_duration"] = round(seconds / both) if both else None
    if "views_per_visit" in metrics:
        views = _number(metrics["views_per_visit"]) * visits + imported["pageviews"]
        metrics["views_per_visit"] = round(views / both, 2) if both else None
    for metric in ("visits", "pageviews", "events"):
        if metric in metrics:
            metrics[metric] = int(_number(metrics[metric])) + imported[metric]
    if "visitors" in metrics:
        native = metrics["visitors"]
        added = imported["visitors"]
        if isinstance(native, Estimate):
            metrics["visitors"] = Estimate(native.value + added, native.lower + added, native.upper + added)
        else:
            metrics["visitors"] = int(native or 0) + added


def _number(value: Any) -> float:
    if value is None:
        return 0.0
    return float(value.value) if isinstance(value, Estimate) else float(value)


def totals(dimension: str | None, rows: pa.Table) -> dict[Any, dict[str, int]]:
    """An export table's ``rows`` summed by ``dimension``'s value (a date as ISO text, "" as "(none)"):
    visitors, visits, pageviews, events, bounces and seconds, as the Stats API adds them."""
    table, column = DIMENSION_TABLES[dimension]
    return _imported_totals(Plan(table, column), rows)


def whole_ranges(start: dt.date, end: dt.date, rows: pa.Table) -> pa.Table:
    """The range imports' rows whose whole range lies within the dates (the ones an answer may add)."""
    return rows.filter(_within(rows, start, end))


def _within(rows: pa.Table, start: dt.date, end: dt.date) -> pa.ChunkedArray:
    """Which range rows' ranges lie wholly within ``start`` to ``end``."""
    return pc.and_(
        pc.greater_equal(rows.column("first_date"), pa.scalar(start)),
        pc.less_equal(rows.column("last_date"), pa.scalar(end)),
    )


def range_totals(dimension: str, rows: pa.Table) -> dict[Any, dict[str, int]]:
    """A range import's rows of ``dimension``'s file summed by value: visitors, or events by event:name."""
    table = RANGE_TABLES[dimension]
    return _range_totals(rows.filter(pc.equal(rows.column("table_name"), table)))
