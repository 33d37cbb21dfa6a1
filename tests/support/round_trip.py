"""What the round trip through Plausible's format checks for each breakdown, shared by the unit
test (against the query layer's exact answers) and the integration test (against the views)."""

from __future__ import annotations

from typing import Any

# Every one-dimension breakdown an export table answers (the visitors and custom-events tables are
# checked by the tests themselves; regions need a city database).
BREAKDOWNS = (
    "visit:source",
    "event:page",
    "visit:entry_page",
    "visit:exit_page",
    "visit:country",
    "visit:device",
    "visit:browser",
    "visit:os",
)


def breakdown_metrics(dimension: str) -> list[str]:
    """Visits by each dimension; a page's views too. (A session table's page views are its visits'
    page views, Plausible's meaning, not the page views whose own event carried the value.)"""
    return ["visits", "pageviews"] if dimension == "event:page" else ["visits"]


def exported(dimension: str, rows: dict[tuple[Any, ...], Any]) -> dict[tuple[Any, ...], Any]:
    """The original's rows the export keeps: no location row for an unknown country, as Plausible's."""
    return {value: m for value, m in rows.items() if not (dimension == "visit:country" and value == ("(none)",))}
