"""A stats query in Tally's words: what the API and, later, the dashboard ask the query layer.

The names are Plausible's Stats API v2 names (``visitors``, ``event:page``, ``visit:source``) so
a Plausible client only changes its base URL; each maps to one of Tally's dimensions
(:mod:`tally.dimensions`). What is listed here is answered; anything else is refused by name.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Literal

from query.site_time import UTC, LocalDays, is_utc, utc_dates
from tally.vitals import BANDS, REPORTED_QUANTILE, VITALS

MAX_RANGE_DAYS = 400  # as the dashboard: a longer range is refused, never silently cut
MAX_LIMIT = 10_000  # rows a query may ask for at once

# Metrics Tally answers. Engagement and load percentiles are Tally's own (merged t-digests).
EXACT_METRICS = ("visits", "pageviews", "views_per_visit", "bounce_rate", "visit_duration", "events")
PERCENTILE_KINDS = ("engagement", "load")  # engagement time and load time, in ms
PERCENTILES = (50, 90, 99)
PERCENTILE_METRICS = tuple(f"{kind}_p{q}" for kind in PERCENTILE_KINDS for q in PERCENTILES)
# Core Web Vitals (tally/vitals.py): each vital's p75 (merged t-digests, approximate), the percent of
# measured page views in each of Google's bands (exact), and Plausible's scroll_depth (exact).
VITAL_P75_METRICS = tuple(f"{v.name}_p{round(REPORTED_QUANTILE * 100)}" for v in VITALS)
VITAL_BAND_METRICS = tuple(f"{v.name}_{band}" for v in VITALS for band in BANDS)
SCROLL_DEPTH = "scroll_depth"
VITALS_METRICS = (*VITAL_P75_METRICS, *VITAL_BAND_METRICS, SCROLL_DEPTH)
# The API dimensions vitals metrics break down by -> agg.vitals_1h's dimension (tally.vitals.VITALS_DIMENSIONS).
VITALS_API_DIMENSIONS = {"event:page": "page", "visit:device": "device"}
METRICS = ("visitors", *EXACT_METRICS, "percentage", "conversion_rate", *PERCENTILE_METRICS, *VITALS_METRICS)
VISIT_METRICS = ("visits", "views_per_visit", "bounce_rate", "visit_duration")

Kind = Literal["time", "traffic", "visit", "event"]
PROPS_PREFIX = "event:props:"
GOAL = "event:goal"


@dataclass(frozen=True)
class Dimension:
    """An API dimension: where its rows come from, which Tally dimension it is, and its raw column.

    ``name`` is a Tally dimension (:mod:`tally.dimensions`) or the time grain; ``aggregated`` says
    whether the aggregate views keep it (else only raw events answer it); ``column`` is its column
    in ``raw.pageviews`` (a visit dimension's value is that of the visit's first event).
    """

    kind: Kind
    name: str
    column: str = ""
    aggregated: bool = True


_AUDIENCE = {
    "visit:source": "source",
    "visit:channel": "channel",
    "visit:utm_campaign": "campaign",
    "visit:country": "country",
    "visit:region": "region",  # ISO 3166-2 (DE-BE); only with geo.city_db
    "visit:city": "city",  # English name (Plausible's is a GeoNames id); only with geo.city_db
    "visit:device": "device",
    "visit:browser": "browser",
    "visit:os": "os",
}
DIMENSIONS: dict[str, Dimension] = {
    "time": Dimension("time", "day"),
    "time:day": Dimension("time", "day"),
    "time:hour": Dimension("time", "hour"),
    "time:week": Dimension("time", "week", aggregated=False),
    "time:month": Dimension("time", "month", aggregated=False),
    "event:page": Dimension("traffic", "page", "path"),
    "event:hostname": Dimension("event", "hostname", "hostname", aggregated=False),
    "event:name": Dimension("event", "name", "name", aggregated=False),
    GOAL: Dimension("event", "goal", aggregated=False),
    **{api: Dimension("traffic", name, name) for api, name in _AUDIENCE.items()},
    "visit:referrer": Dimension("traffic", "referrer", "referrer", aggregated=False),
    **{
        f"visit:utm_{part}": Dimension("traffic", f"utm_{part}", f"utm_{part}", aggregated=False)
        for part in ("source", "medium", "content", "term")
    },
    "visit:entry_page": Dimension("visit", "entry_page", "entry_page"),
    "visit:exit_page": Dimension("visit", "exit_page", "exit_page"),
}
MAX_PROP_KEY = 64  # as ingest bounds a property's key (ingest/PAYLOAD.md)


def dimension(name: str) -> Dimension:
    """The :class:`Dimension` of an API name, ``event:props:<key>`` included; KeyError if unknown."""
    if name.startswith(PROPS_PREFIX):
        key = name.removeprefix(PROPS_PREFIX)
        if not key or len(key) > MAX_PROP_KEY or not key.isprintable():
            raise KeyError(name)
        return Dimension("event", "props", key, aggregated=False)
    return DIMENSIONS[name]


# Filters answered exactly from raw events: API dimension -> the dashboard's filter key.
RAW_FILTERS = {
    "event:page": "page",
    "visit:source": "source",
    "visit:country": "country",
    "visit:device": "device",
    "visit:browser": "browser",
}
FILTER_OPERATORS = ("is", "is_not", "contains", "contains_not", "matches", "matches_not")
COMPARISONS = ("previous_period", "year_over_year")


class QueryError(ValueError):
    """A query Tally cannot answer as asked; ``part`` names the key at fault (a 400 for the API)."""

    def __init__(self, part: str, message: str) -> None:
        super().__init__(message)
        self.part = part

    def __reduce__(self) -> tuple[type[QueryError], tuple[str, str]]:  # pickled back from a raw question's worker
        return type(self), (self.part, str(self))


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
    """One stats query over an inclusive range of the site's local dates (``timezone``; UTC by default)."""

    site_id: str
    start: dt.date
    end: dt.date
    metrics: tuple[str, ...]
    between: tuple[dt.datetime, dt.datetime] | None = None  # a half-open UTC interval inside [start, end]
    dimensions: tuple[str, ...] = ()
    filters: tuple[Filter, ...] = ()
    order_by: tuple[tuple[str, bool], ...] = ()  # (metric or dimension, descending)
    time_labels: bool = False
    total_rows: bool = False
    compare: tuple[dt.date, dt.date] | None = None  # the comparison range, when include.compare asks for one
    compare_between: tuple[dt.datetime, dt.datetime] | None = None  # ... of a date-time range
    limit: int = MAX_LIMIT
    offset: int = 0
    timezone: str = UTC  # the IANA zone the dates are the site's days in (sites[].timezone)
    imports: bool = False  # include.imports: add imported history where it can answer (query/imported.py)

    def utc_interval(self) -> tuple[dt.datetime, dt.datetime] | None:
        """The half-open UTC interval the query covers: its date-times, or its local days' instants;
        None for whole UTC days (the views' own days)."""
        if self.between is not None:
            return self.between
        return None if is_utc(self.timezone) else LocalDays(self.start, self.end, self.timezone).instants

    def utc_dates(self) -> tuple[dt.date, dt.date]:
        """The UTC dates (the tables' ``event_date`` partitions) the query's instants touch."""
        interval = self.utc_interval()
        return utc_dates(interval) if interval is not None else (self.start, self.end)

    @property
    def dimension(self) -> Dimension | None:
        """The first dimension of this query, or None."""
        return dimension(self.dimensions[0]) if self.dimensions else None


# Filters a vitals query may use: every event dimension a vitals beacon carries itself (its page,
# device, source, country, …); not visits' entry or exit pages, goals, event names or properties.
_NOT_ON_VITALS = ("entry_page", "exit_page", "name", "goal", "props")


def check_vitals(metrics: tuple[str, ...], dimensions: tuple[str, ...], filters: tuple[Filter, ...]) -> None:
    """Refuse (:class:`QueryError`) a query with vitals metrics that Tally cannot answer as asked."""
    asked = [m for m in metrics if m in VITALS_METRICS]
    if not asked:
        return
    others = [m for m in metrics if m not in VITALS_METRICS]
    if others:
        raise QueryError(
            "metrics",
            f"metric {asked[0]!r} cannot be combined with {others[0]!r}: ask Core Web Vitals and scroll depth"
            " metrics in a query of their own",
        )
    supported = ", ".join(repr(d) for d in VITALS_API_DIMENSIONS)
    unsupported = [d for d in dimensions if d not in VITALS_API_DIMENSIONS]
    if unsupported or len(dimensions) > 1:
        shown = repr(unsupported[0]) if unsupported else "two dimensions"
        raise QueryError(
            "dimensions",
            f"metric {asked[0]!r} supports no dimension or one of {supported}, not {shown}",
        )
    for name in _filter_dimensions(filters):
        if dimension(name).name in _NOT_ON_VITALS:
            raise QueryError(
                "filters",
                f"metric {asked[0]!r} cannot be filtered by {name!r}: filter by event:page, event:hostname or a"
                " visit:* dimension the page view itself carries (source, country, device, …), not entry or exit pages",
            )


def _filter_dimensions(filters: tuple[Filter, ...]) -> list[str]:
    out: list[str] = []
    for f in filters:
        out.extend([f.dimension] if f.dimension else _filter_dimensions(f.children))
    return out
