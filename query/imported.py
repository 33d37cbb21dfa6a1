"""Imported history (``imported.daily``, written by ``tally import``) added to an answer when the
question asks for it (``include: {"imports": true}``, as Plausible's Stats API), and only where the
imported tables can answer it; ``meta`` says which (Plausible's ``imports_included``,
``imports_skip_reason`` and ``imports_warning``).

An imported figure is combined with the log's as Plausible combines them: counts are added; a
bounce rate, visit duration or views per visit is the average over the log's visits and the
imported ones together (an export's ``bounces`` and ``visit_duration`` are sums). Imported visitors
are each day's unique visitors added up across days and rows, as Plausible adds them, so a visitor
of two imported days counts twice: ``meta`` marks visitors approximate when imports are included.
The import keeps only days before the site's own first event (``imports/store.py``), so no day is
counted from both.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pyarrow as pa

from query.spec import Query
from tally.dimensions import NONE_VALUE
from tally.sketches import Estimate

# Plausible's reasons, in its words.
UNSUPPORTED = "unsupported_query"
NO_IMPORTED_DATA = "no_imported_data"
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
    if query.filters:
        return Plan(skip_reason=UNSUPPORTED, warning="imported history answers questions without filters")
    asked = query.dimensions[0] if query.dimensions else None
    if len(query.dimensions) > 1 or asked not in DIMENSION_TABLES:
        names = ", ".join(d for d in DIMENSION_TABLES if d)
        return Plan(skip_reason=UNSUPPORTED, warning=f"imported history breaks down by one of {names}, or none")
    if query.compare is not None or query.between is not None:
        return Plan(skip_reason=UNSUPPORTED, warning="imported history answers whole days without a comparison")
    table, column = DIMENSION_TABLES[asked]
    missing = [m for m in query.metrics if m not in TABLE_METRICS[table]]
    if missing:
        answered = ", ".join(TABLE_METRICS[table])
        warning = f"imported {table} rows have no {', '.join(missing)} (they answer {answered})"
        return Plan(skip_reason=UNSUPPORTED, warning=warning)
    return Plan(table, column)


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
    query: Query, found: Plan, rows: list[dict[str, Any]], imported: pa.Table
) -> tuple[list[dict[str, Any]], bool]:
    """The log's ``rows`` (of :func:`native_query`) with the imported rows added; True when any was."""
    if imported.num_rows == 0:
        return rows, False
    totals = _imported_totals(found, imported)
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
        sums = totals.setdefault(
            value, dict.fromkeys(("visitors", "visits", "pageviews", "events", "bounces", "seconds"), 0)
        )
        sums["visitors"] += r["visitors"]
        sums["visits"] += r[visits]
        sums["pageviews"] += r["pageviews"] if found.table != "custom_events" else 0
        sums["events"] += r[events]
        sums["bounces"] += r["bounces"]
        sums["seconds"] += r["visit_duration"]
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
