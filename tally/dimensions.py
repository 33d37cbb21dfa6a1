"""The dimensions reports break traffic down by, and the words around them.

A view row holds one dimension and its value; ``all`` is the site total and ``(none)`` a
dimension with no value (direct traffic, unknown country, …). Each mapping goes from the
dimension's name to the event column (in ``raw.pageviews``) it is read from.
"""

from __future__ import annotations

from typing import Literal

ALL = "all"  # the site total
NONE_VALUE = "(none)"  # a dimension with no value (direct traffic, unknown country, …)
EVENT = "event"  # custom events by name (traffic views only)

# Attributes a visit takes from its first event; each is also a traffic dimension of its own.
# Region and city are None unless the operator configured a city database (geo.city_db).
AUDIENCE_DIMENSIONS = ("source", "channel", "campaign", "country", "region", "city", "browser", "os", "device")

# Traffic views (agg.traffic_*): dimension name -> event column; plus ALL and EVENT (custom event names).
TRAFFIC_DIMENSIONS: dict[str, str] = {"page": "path", **{name: name for name in AUDIENCE_DIMENSIONS}}
# Visit views (agg.visits_*): dimension name -> session column.
VISIT_DIMENSIONS: dict[str, str] = {
    "entry_page": "entry_page",
    "exit_page": "exit_page",
    **{name: name for name in AUDIENCE_DIMENSIONS},
}


def visit_column(name: str) -> str:
    """The agg.events column holding the visit's value of ``name`` (its entry page, its first
    event's source …), beside the event's own ``name`` column."""
    return f"visit_{name}"


# Every dimension a traffic row can carry, and every one a visit row can.
TRAFFIC_DIMENSION_NAMES = (ALL, *TRAFFIC_DIMENSIONS, EVENT)
VISIT_DIMENSION_NAMES = (ALL, *VISIT_DIMENSIONS)
# The raw column of every traffic dimension a drill-down filters on ("event" is a custom event's name).
RAW_DIMENSION_COLUMNS: dict[str, str] = {**TRAFFIC_DIMENSIONS, EVENT: "name"}
# The dashboard's filters: its URL key (f_<key>) -> event column in raw.pageviews (and dimension in
# agg.traffic_*).
FILTERS: dict[str, str] = {
    key: RAW_DIMENSION_COLUMNS[key] for key in ("page", "source", "country", "region", "city", "device", "browser")
}

# Roll-up grains of the views.
Grain = Literal["hour", "day"]
