"""A stats query in Tally's words: what the API and, later, the dashboard ask the query layer.

The names are Plausible's Stats API v2 names (``visitors``, ``event:page``, ``visit:source``) so
a Plausible client only changes its base URL; each maps to one of Tally's dimensions
(:mod:`tally.dimensions`). What is listed here is answered; anything else is refused by name.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Literal

MAX_RANGE_DAYS = 400  # as the dashboard: a longer range is refused, never silently cut
MAX_LIMIT = 10_000  # rows a query may ask for at once

# Metrics Tally answers. Engagement and load percentiles are Tally's own (merged t-digests).
EXACT_METRICS = ("visits", "pageviews", "views_per_visit", "bounce_rate", "visit_duration", "events")
PERCENTILE_METRICS = tuple(f"{kind}_p{q}" for kind in ("engagement", "load") for q in (50, 90, 99))
METRICS = ("visitors", *EXACT_METRICS, "percentage", *PERCENTILE_METRICS)
VISIT_METRICS = ("visits", "views_per_visit", "bounce_rate", "visit_duration")

Kind = Literal["time", "traffic", "visit"]


@dataclass(frozen=True)
class Dimension:
    """An API dimension: where its rows come from and which Tally dimension it is."""

    kind: Kind
    name: str  # a Tally dimension (tally.dimensions), or the time grain


DIMENSIONS: dict[str, Dimension] = {
    "time": Dimension("time", "day"),
    "time:day": Dimension("time", "day"),
    "time:hour": Dimension("time", "hour"),
    "event:page": Dimension("traffic", "page"),
    "visit:source": Dimension("traffic", "source"),
    "visit:channel": Dimension("traffic", "channel"),
    "visit:utm_campaign": Dimension("traffic", "campaign"),
    "visit:country": Dimension("traffic", "country"),
    "visit:device": Dimension("traffic", "device"),
    "visit:browser": Dimension("traffic", "browser"),
    "visit:os": Dimension("traffic", "os"),
    "visit:entry_page": Dimension("visit", "entry_page"),
    "visit:exit_page": Dimension("visit", "exit_page"),
}
# Filters answered exactly from raw events: API dimension -> the dashboard's filter key.
RAW_FILTERS = {
    "event:page": "page",
    "visit:source": "source",
    "visit:country": "country",
    "visit:device": "device",
    "visit:browser": "browser",
}


class QueryError(ValueError):
    """A query Tally cannot answer as asked; ``part`` names the key at fault (a 400 for the API)."""

    def __init__(self, part: str, message: str) -> None:
        super().__init__(message)
        self.part = part


@dataclass(frozen=True)
class Filter:
    """``is``/``is_not``/``contains``/… on a dimension, or ``and``/``or``/``not`` of filters."""

    op: str
    dimension: str = ""
    values: tuple[str, ...] = ()
    case_sensitive: bool = True
    children: tuple[Filter, ...] = field(default=())


@dataclass(frozen=True)
class Query:
    """One stats query over an inclusive range of UTC dates."""

    site_id: str
    start: dt.date
    end: dt.date
    metrics: tuple[str, ...]
    dimensions: tuple[str, ...] = ()
    filters: tuple[Filter, ...] = ()
    order_by: tuple[tuple[str, bool], ...] = ()  # (metric or dimension, descending)
    time_labels: bool = False
    total_rows: bool = False
    limit: int = MAX_LIMIT
    offset: int = 0

    @property
    def dimension(self) -> Dimension | None:
        """The one dimension of this query (several are refused for now), or None."""
        return DIMENSIONS[self.dimensions[0]] if self.dimensions else None
