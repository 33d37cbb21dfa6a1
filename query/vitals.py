"""Core Web Vitals and scroll depth of a site over a range: the one place their figures are computed.

Per site total (``all``), page or device, each vital's p75 and the share of measured page views in
each of Google's bands (:mod:`tally.vitals`), and the average scroll depth. Two readers answer
with the same :class:`VitalFigures`, as the traffic reports do (:mod:`query.report`):

- :class:`AggregateVitals` reads ``agg.vitals_1h``: whole days, no filters. Band counts and scroll
  depth sums are exact sums of the hour rows; the p75 comes from the hours' t-digests merged
  (never averaged), approximate with the rank error of :data:`P75_RANK_ERROR`.
- :class:`ExactVitals` reads ``raw.pageviews`` with DuckDB: any filter, any instants, every figure
  exact (the p75 is DuckDB's ``quantile_cont``, as the exact engagement percentiles).

A vital's band shares divide by the page views that measured that vital (a page view without an
interaction has no INP), so each vital's three shares add up to 100. Scroll depth is the average of
the deepest scroll positions sent with ``vitals`` and ``engagement`` beacons (sum / count).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import duckdb
import pandas as pd
import pyarrow.dataset as ds

from query.aggregates import Aggregates, Range
from query.exact import event_condition
from query.raw_events import VISIT_ATTRIBUTES, memory_limit, open_events, within
from query.report import VitalsReport
from query.scan_cache import prepared_scan
from query.site_time import LocalDays, is_utc
from query.spec import (
    SCROLL_DEPTH,
    VITAL_BAND_METRICS,
    VITAL_P75_METRICS,
    VITALS_API_DIMENSIONS,
    VITALS_METRICS,
    Filter,
    Query,
    QueryError,
)
from tally.dimensions import ALL, NONE_VALUE
from tally.sketches import digest_quantiles, merge_digests
from tally.storage import text_is
from tally.tables import VITALS_1H
from tally.vitals import (
    BANDS,
    MEASURED_COLUMN,
    REPORTED_QUANTILE,
    SCROLL_COUNT_COLUMN,
    SCROLL_DEPTH_COLUMN,
    SCROLL_SUM_COLUMN,
    VITALS,
    VITALS_DIMENSIONS,
    VITALS_TYPE,
    Band,
)

# The t-digests' rank error at p75 (compression 200; tests demand ≤ 0.5% at p50/p90/p99): the
# reported value is one whose rank lies within this fraction of the measured page views of p75's.
P75_RANK_ERROR = 0.005
P75_METHOD = (
    "merged t-digests of agg.vitals_1h: a value whose rank is within 0.5% of the measured page views"
    " of the 75th percentile's (rank error about 0.5%)"
)
BANDS_METHOD = "counted in agg.vitals_1h: percent of the page views that measured the vital, per Google's band"
SCROLL_METHOD = "agg.vitals_1h: sum of the page views' deepest scroll positions / page views with one"
_SCROLL_TYPES = (VITALS_TYPE, "engagement")
_SCROLL_TYPES_SQL = ", ".join(f"'{t}'" for t in _SCROLL_TYPES)  # for an IN (...)
# The suffixes of the band counts ExactVitals selects per vital, in the order of tally.vitals.BANDS.
_BAND_SUFFIXES = ("good", "ni", "poor")


@dataclass(frozen=True)
class BandCounts:
    """Page views whose value of one vital fell in each of Google's bands (exact counts)."""

    good: int = 0
    needs_improvement: int = 0
    poor: int = 0

    @property
    def measured(self) -> int:
        return self.good + self.needs_improvement + self.poor

    def share(self, band: Band) -> float | None:
        """Percent of the measured page views in ``band`` (one decimal), None when none measured it."""
        count: int = getattr(self, band)
        return round(100 * count / self.measured, 1) if self.measured else None


@dataclass(frozen=True)
class VitalFigures:
    """The vitals of one site total, page or device (``value``; ``""`` for the site total)."""

    value: str
    measured: int  # page views with a vitals beacon
    p75: Mapping[str, float | None]  # vital name -> p75 (ms; CLS unitless), None when not measured
    bands: Mapping[str, BandCounts]  # vital name -> page views per band
    scroll_sum: int = 0
    scroll_count: int = 0

    @property
    def scroll_depth(self) -> float | None:
        """Average deepest scroll position of the page views that sent one (percent), None for none."""
        return self.scroll_sum / self.scroll_count if self.scroll_count else None

    def metric(self, name: str) -> float | int | None:
        """One Stats API metric (:data:`query.spec.VITALS_METRICS`), rounded as the API shows it."""
        if name == SCROLL_DEPTH:
            depth = self.scroll_depth
            return round(depth) if depth is not None else None  # a whole percent, as Plausible's
        vital_name, _, rest = name.partition("_")
        if name in VITAL_P75_METRICS:
            p75 = self.p75.get(vital_name)
            if p75 is None:
                return None
            return round(p75, 3) if vital_name == "cls" else round(p75)
        assert name in VITAL_BAND_METRICS, f"not a vitals metric: {name!r}"
        return self.bands.get(vital_name, BandCounts()).share(rest)  # type: ignore[arg-type]


def empty_figures(value: str = "") -> VitalFigures:
    """The figures of something nothing was measured for."""
    return VitalFigures(value, 0, {v.name: None for v in VITALS}, {v.name: BandCounts() for v in VITALS})


class VitalsSources(Protocol):
    """Where vitals come from (:class:`query.sources.Sources`)."""

    def aggregate_vitals(self, site_id: str, start: dt.date, end: dt.date) -> VitalsReport: ...
    def exact_vitals(
        self,
        site_id: str,
        start: dt.date,
        end: dt.date,
        *,
        filters: tuple[Filter, ...] = (),
        between: tuple[dt.datetime, dt.datetime] | None = None,
    ) -> VitalsReport | None: ...


@dataclass(frozen=True)
class AggregateVitals:
    """Vitals of one site over whole days from ``agg.vitals_1h`` (merged digests, summed counts)."""

    agg: Aggregates
    site_id: str
    days: Range
    exact = False

    def vitals(self, dimension: str) -> list[VitalFigures]:
        """Figures of ``dimension`` (``all``, ``page`` or ``device``), one per value measured, by value."""
        assert dimension == ALL or dimension in VITALS_DIMENSIONS, f"agg.vitals_1h has no dimension {dimension!r}"
        columns = ["value", MEASURED_COLUMN, SCROLL_SUM_COLUMN, SCROLL_COUNT_COLUMN]
        for v in VITALS:
            columns += [v.digest_column, *(v.band_column(b) for b in BANDS)]
        rows = self.agg.rows(VITALS_1H.table, self.site_id, self.days, columns, text_is("dimension", dimension))
        return figures_from_rows(rows)


def figures_from_rows(rows: pd.DataFrame) -> list[VitalFigures]:
    """Hour rows of ``agg.vitals_1h`` folded per value: counts added, each vital's digests merged."""
    out = []
    for value, group in rows.groupby("value", sort=True):
        p75: dict[str, float | None] = {}
        bands: dict[str, BandCounts] = {}
        for v in VITALS:
            merged = merge_digests(group[v.digest_column].tolist())
            quantile = digest_quantiles(merged, [REPORTED_QUANTILE])[0] if merged else math.nan
            p75[v.name] = None if math.isnan(quantile) else quantile
            bands[v.name] = BandCounts(*(int(group[v.band_column(b)].sum()) for b in BANDS))
        figures = VitalFigures(
            str(value),
            int(group[MEASURED_COLUMN].sum()),
            p75,
            bands,
            int(group[SCROLL_SUM_COLUMN].sum()),
            int(group[SCROLL_COUNT_COLUMN].sum()),
        )
        if figures.measured or figures.scroll_count:
            out.append(figures)
    return out


_COLUMNS = ", ".join(
    ["event_time", "type", "path", "hostname", SCROLL_DEPTH_COLUMN, *(v.column for v in VITALS), *VISIT_ATTRIBUTES]
)


@dataclass(frozen=True)
class ExactVitals:
    """Vitals of one site's non-bot raw events (DuckDB), narrowed by filters and instants: exact."""

    raw: ds.Dataset
    site_id: str
    days: Range
    filters: tuple[Filter, ...] = ()
    between: tuple[dt.datetime, dt.datetime] | None = None
    # The table and version ``raw`` reads, and the session gap: given, the figures are read from the
    # range's prepared scan, which the page's other drill-downs share (query.scans.PreparedScan).
    snapshot: tuple[str, int] | None = None
    gap_ms: int = 0
    exact = True

    def vitals(self, dimension: str) -> list[VitalFigures]:
        """Figures of ``dimension`` (``all``, ``page`` or ``device``), one per value measured, by value."""
        assert dimension == ALL or dimension in VITALS_DIMENSIONS, f"no vitals dimension {dimension!r}"
        key = "''" if dimension == ALL else f"coalesce(e.{VITALS_DIMENSIONS[dimension]}, '{NONE_VALUE}')"
        where, params = event_condition(self.filters)
        where += f" AND {within(self.between, 'e.')}"
        # The vitals' quantiles and bands over the vitals events alone, the scroll depths over the beacons
        # that carry one; joined by value. In one pass over both kinds, the vitals' twenty filtered
        # aggregates were evaluated on every engagement beacon too: 260 ms a question over 90 days of 10M
        # events with one country's filter, against about 20 ms apart (that data set has no vitals
        # beacons); over 3M synthetic events, a third of them vitals beacons, 184-198 ms against 131-147.
        measures = ["count(*) AS measured"]
        for v in VITALS:
            x = f"e.{v.column}::DOUBLE"
            measures += [
                f"quantile_cont({x}, {REPORTED_QUANTILE}) AS {v.name}_p75",
                f"count(*) FILTER (WHERE {x} <= {v.good_max}) AS {v.name}_good",
                f"count(*) FILTER (WHERE {x} > {v.good_max} AND {x} <= {v.poor_above}) AS {v.name}_ni",
                f"count(*) FILTER (WHERE {x} > {v.poor_above}) AS {v.name}_poor",
            ]
        counts = ["measured", *(f"{v.name}_{band}" for v in VITALS for band in _BAND_SUFFIXES)]
        depth = f"e.{SCROLL_DEPTH_COLUMN}::BIGINT"
        text = f"""
            WITH measured AS (
                SELECT {key} AS value, {", ".join(measures)} FROM evr e
                WHERE e.type = '{VITALS_TYPE}' AND {where} GROUP BY value
            ), scrolled AS (
                SELECT {key} AS value, sum({depth}) AS scroll_sum, count({depth}) AS scroll_count FROM evr e
                WHERE e.type IN ({_SCROLL_TYPES_SQL}) AND {depth} IS NOT NULL AND {where} GROUP BY value
            )
            SELECT value, {", ".join(f"coalesce({c}, 0) AS {c}" for c in counts)},
                {", ".join(f"{v.name}_p75" for v in VITALS)},
                coalesce(scroll_sum, 0) AS scroll_sum, coalesce(scroll_count, 0) AS scroll_count
            FROM measured FULL JOIN scrolled USING (value) ORDER BY value
        """
        with self._events() as con:
            try:
                frame = con.execute(text, params).fetchall()
            except duckdb.InvalidInputException as e:  # a `matches` pattern RE2 cannot compile
                raise QueryError("filters", f"a filter's regular expression is not valid: {e}") from e
            except duckdb.OutOfMemoryException as e:
                raise QueryError(
                    "body", f"this question needs more than {memory_limit()} of memory: narrow the range"
                ) from e
            names = [d[0] for d in con.description or []]
        return [_exact_figures(dict(zip(names, record, strict=True))) for record in frame]

    @contextmanager
    def _events(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection with ``evr``: the range's prepared scan when there is a snapshot, else a scan of its own."""
        if self.snapshot is not None:
            scan = prepared_scan(self.raw, self.snapshot, self.site_id, self.days, self.between, self.gap_ms)
            with scan.cursor() as con:
                yield con
            return
        with open_events(self.raw, self.site_id, self.days, _COLUMNS) as con:
            # A table, not a view: a question reads its beacons twice (vitals, then scroll depths), the dataset once.
            con.execute(f"CREATE TEMP TABLE evr AS SELECT * FROM ev WHERE type IN ({_SCROLL_TYPES_SQL})")
            yield con


def _exact_figures(record: Mapping[str, Any]) -> VitalFigures:
    return VitalFigures(
        str(record["value"]),
        int(record["measured"]),
        {v.name: record[f"{v.name}_p75"] for v in VITALS},
        {v.name: BandCounts(*(int(record[f"{v.name}_{band}"]) for band in _BAND_SUFFIXES)) for v in VITALS},
        int(record["scroll_sum"]),
        int(record["scroll_count"]),
    )


def fits_vitals_view(query: Query) -> bool:
    """Whether ``agg.vitals_1h`` holds a vitals query's answer: whole days and no filters, and days
    whose edges fall on whole UTC hours (a zone on a half or quarter hour: raw events, exact)."""
    if query.between is not None or query.filters:
        return False
    return is_utc(query.timezone) or LocalDays(query.start, query.end, query.timezone).hour_aligned


def is_vitals_query(query: Query) -> bool:
    """Whether ``query`` asks for vitals metrics (:func:`query.spec.check_vitals` kept them alone)."""
    return any(m in VITALS_METRICS for m in query.metrics)


def vitals_rows(query: Query, sources: VitalsSources) -> tuple[list[dict[str, Any]], str]:
    """The engine's rows (``{"dimensions", "metrics"}``) of a vitals query and the source that answered."""
    if fits_vitals_view(query):
        reader: VitalsReport | None = sources.aggregate_vitals(query.site_id, query.start, query.end)
        source = "aggregates"
    else:
        reader = sources.exact_vitals(
            query.site_id, *query.utc_dates(), filters=query.filters, between=query.utc_interval()
        )
        source = "raw"
    dimension = VITALS_API_DIMENSIONS[query.dimensions[0]] if query.dimensions else ALL
    figures = reader.vitals(dimension) if reader is not None else []
    if not query.dimensions:  # as Plausible: a query without dimensions always has its one row
        figures = figures or [empty_figures()]
    return [
        {"dimensions": [f.value] if query.dimensions else [], "metrics": {m: f.metric(m) for m in query.metrics}}
        for f in figures
    ], source


def vitals_metric_meta(metric: str, source: str) -> dict[str, Any]:
    """``meta.metrics[metric]`` of a vitals metric: the p75 from the view is approximate, with its bound."""
    if source != "aggregates":
        return {"exact": True, "method": "counted from raw events"}
    if metric in VITAL_P75_METRICS:
        return {"exact": False, "rank_error_bound": P75_RANK_ERROR, "method": P75_METHOD}
    return {"exact": True, "method": SCROLL_METHOD if metric == SCROLL_DEPTH else BANDS_METHOD}
