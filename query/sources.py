"""Which report answers a question: the aggregate tables, or raw events when filters are set.

One :class:`Sources` per process keeps the tables' snapshots warm between queries
(:class:`query.aggregates.Aggregates`): the aggregate tables', and raw.pageviews' for the
dashboard's drill-downs, whose answers are keyed on that same version. The API's raw questions
open the table's newest version per question.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Mapping
from typing import Final

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds

from query.aggregates import AggregateReport, Aggregates, Range
from query.exact import ExactQuery
from query.goals import Step
from query.open_visits import Tables as OpenTables
from query.open_visits import empty as empty_open_visits
from query.open_visits import open_visits, tail_of
from query.raw import API_FILTERS, RawQuery
from query.report import Report, VitalsReport
from query.site_time import UTC, LocalDays, is_utc
from query.spec import Filter
from query.vitals import AggregateVitals, ExactVitals
from query.zoned import ZonedReport, ZonedVitals
from tally.salt_periods import visitors_meaning
from tally.settings import Settings
from tally.storage import arrow_dataset, find_table, text_is
from tally.table_schemas import IMPORTED_DAILY_SCHEMA, IMPORTED_RANGES_SCHEMA
from tally.tables import EVENTS, IMPORTED_DAILY, IMPORTED_RANGES, RAW_PAGEVIEWS, TRAFFIC_1M

NO_SITE: Final = ""
"""The site of a question nothing can match (filters before the archiver has written any raw event).
No site has this id (``tally.site_registry.SITE_ID_FORMAT``), so a report of it reads the tables
and finds no row: its figures are empty, in the shapes a site's have (:meth:`Sources.nothing_matches`)."""


def session_gap_ms(settings: Settings) -> int:
    """The session gap the views use, in milliseconds, for sessionising raw events the same way."""
    return settings.spark.session_gap // dt.timedelta(milliseconds=1)


class Sources:
    """The reports of one process: warm table snapshots, the dashboard's raw events among them (the
    API's raw questions open the table's newest version)."""

    def __init__(self, settings: Settings, aggregates: Aggregates | None = None) -> None:
        self.settings = settings
        self.aggregates = aggregates or Aggregates(settings)

    def open_visit_rows(self, site_id: str) -> pd.DataFrame:
        """The site's visits still open (:mod:`query.open_visits`), read again only when raw.pageviews,
        agg.events or agg.traffic_1m has a new version (the snapshots the aggregate reads keep,
        refreshed every few seconds)."""
        raw = self.aggregates.snapshot(RAW_PAGEVIEWS)
        if raw is None:
            return empty_open_visits()
        events, minutes = self.aggregates.snapshot(EVENTS.table), self.aggregates.snapshot(TRAFFIC_1M.table)
        versions = (raw[0], *(t[0] if t is not None else None for t in (events, minutes)))
        tables = OpenTables(raw[1], *(t[1] if t is not None else None for t in (events, minutes)))
        read = functools.partial(open_visits, tables, site_id, tail_of(self.settings))
        return self.aggregates.kept(("open visits", site_id), versions, read)

    def open_visits(self, site_id: str, start: dt.date, end: dt.date) -> int:
        """How many of the site's visits that started in its local dates are still open."""
        return len(self.views_report(site_id, start, end).open_visits())

    def timezone(self, site_id: str) -> str:
        """The IANA zone a site's days are counted in (``sites[].timezone``; UTC for an unknown site)."""
        site = self.settings.site(site_id)
        return site.timezone if site is not None else UTC

    def raw(self, site_id: str, days: Range, filters: Mapping[str, str]) -> RawQuery | None:
        """A drill-down over raw events of the site's local days, or None before the archiver has written anything."""
        found = self.raw_snapshot(shared=True)
        if found is None:
            return None
        dataset, snapshot = found
        gap = session_gap_ms(self.settings)
        return RawQuery(dataset, site_id, days, filters, gap, self.timezone(site_id), snapshot)

    def raw_snapshot(self, *, shared: bool) -> tuple[ds.Dataset, tuple[str, int]] | None:
        """raw.pageviews as an Arrow dataset, and its (table, version): the key of its prepared scans
        (:class:`query.scans.PreparedScan`); None before the archiver has written anything.

        ``shared``: the snapshot the aggregate reads keep (:class:`Aggregates`, reloaded when a new
        version shows up, at most every few seconds): the dashboard keys its answers on that version,
        and a filtered page then neither reads the table's log nor lists its files again. Otherwise
        the table's newest version, read now (the API's raw questions).
        """
        uri = self.settings.table_uri(RAW_PAGEVIEWS)
        if shared:
            kept = self.aggregates.snapshot(RAW_PAGEVIEWS)
            if kept is None:
                return None
            version, dataset = kept
            return dataset, (uri, version)
        table = find_table(self.settings, RAW_PAGEVIEWS)
        if table is None:
            return None
        return arrow_dataset(table), (uri, table.version())

    def nothing_matches(self, days: Range) -> AggregateReport:
        """The report of a question nothing matches: the views' report of :data:`NO_SITE` over ``days``."""
        return AggregateReport(self.aggregates, NO_SITE, days)

    def no_vitals(self, days: Range) -> AggregateVitals:
        """The vitals of a question nothing matches: ``agg.vitals_1h``'s of :data:`NO_SITE` over ``days``."""
        return AggregateVitals(self.aggregates, NO_SITE, days)

    def aggregate_report(self, site_id: str, start: dt.date, end: dt.date) -> Report:
        """The aggregate tables' report of a site over a range of its local dates (:meth:`views_report`)."""
        return self.views_report(site_id, start, end)

    def views_report(self, site_id: str, start: dt.date, end: dt.date) -> AggregateReport | ZonedReport:
        """The views' report of a site's local dates: the views' own days for a UTC site, else its
        days put together from UTC days, hours and minutes (:mod:`query.zoned`)."""
        timezone = self.timezone(site_id)
        still_open = functools.partial(self.open_visit_rows, site_id)  # read only when a visit figure is asked
        if is_utc(timezone):
            return AggregateReport(self.aggregates, site_id, Range(start, end), still_open)
        raw = functools.partial(self.raw, site_id, Range(start, end), {})  # opened only for custom properties
        return ZonedReport(self.aggregates, site_id, LocalDays(start, end, timezone), raw, still_open)

    def exact(self, site_id: str, *, prepared: bool = False) -> ExactQuery | None:
        """Any query over the site's raw events, exact; None before the archiver has written anything.
        ``prepared``: the questions of one range read and sessionise its events once, a copy kept in
        this process (:class:`query.scans.PreparedScan`; an export asks ten questions of one range)."""
        found = self.raw_snapshot(shared=False)
        if found is None:
            return None
        site = next((s for s in self.settings.sites if s.site_id == site_id), None)
        goals = tuple(Step.parse(g) for g in site.goals) if site is not None else ()
        snapshot = found[1] if prepared else None
        return ExactQuery(found[0], site_id, session_gap_ms(self.settings), goals, snapshot=snapshot)

    def imported(self, site_id: str, start: dt.date, end: dt.date, table: str) -> pa.Table:
        """The site's imported rows of one export table over its local dates (none before any import)."""
        found = find_table(self.settings, IMPORTED_DAILY)
        if found is None:
            return IMPORTED_DAILY_SCHEMA.empty_table()
        where = (
            text_is("site_id", site_id)
            & text_is("table_name", table)
            & (ds.field("date") >= start)
            & (ds.field("date") <= end)
        )
        return arrow_dataset(found).to_table(filter=where)

    def imported_ranges(self, site_id: str, start: dt.date, end: dt.date) -> pa.Table:
        """The site's range imports' rows (every file's) whose range meets its local dates ``start`` to ``end``."""
        found = find_table(self.settings, IMPORTED_RANGES)
        if found is None:
            return IMPORTED_RANGES_SCHEMA.empty_table()
        where = text_is("site_id", site_id) & (ds.field("first_date") <= end) & (ds.field("last_date") >= start)
        return arrow_dataset(found).to_table(filter=where)

    def visitors_meaning(self, site_id: str, start: dt.date, end: dt.date) -> str:
        """What "visitors" counts over the range, given the site's salt period (:mod:`tally.salt_periods`)."""
        site = self.settings.site(site_id)
        return visitors_meaning(site.salt_period if site else "day", start, end)

    def report(self, site_id: str, start: dt.date, end: dt.date, filters: Mapping[str, str]) -> Report:
        """The aggregate report without filters; with filters, raw events (exact; empty before any)."""
        days = Range(start, end)
        if not filters:
            return self.aggregate_report(site_id, start, end)
        raw = self.raw(site_id, days, filters)
        return raw if raw is not None else self.nothing_matches(days)  # no raw rows

    def aggregate_vitals(self, site_id: str, start: dt.date, end: dt.date, *, shared: bool = False) -> VitalsReport:
        """Core Web Vitals and scroll depth of whole local days from ``agg.vitals_1h`` (p75 approximate);
        a site whose days begin on a half or quarter hour gets them from raw events (exact), since
        the view keeps whole hours only (``shared``: as :meth:`exact_vitals`)."""
        timezone = self.timezone(site_id)
        if is_utc(timezone):
            return AggregateVitals(self.aggregates, site_id, Range(start, end))
        days = LocalDays(start, end, timezone)
        if days.hour_aligned:
            return ZonedVitals(self.aggregates, site_id, days)
        exact = self.exact_vitals(site_id, *days.utc_dates, between=days.instants, shared=shared)
        return exact if exact is not None else self.no_vitals(Range(start, end))  # no raw rows

    def exact_vitals(
        self,
        site_id: str,
        start: dt.date,
        end: dt.date,
        *,
        filters: tuple[Filter, ...] = (),
        between: tuple[dt.datetime, dt.datetime] | None = None,
        shared: bool = False,
    ) -> VitalsReport | None:
        """Core Web Vitals and scroll depth from raw events, exact; None before the archiver has written anything.
        ``shared``: over the snapshot the aggregate reads keep (:meth:`raw_snapshot`), as the dashboard reads."""
        found = self.raw_snapshot(shared=shared)
        if found is None:
            return None
        dataset, snapshot = found
        gap = session_gap_ms(self.settings)
        return ExactVitals(dataset, site_id, Range(start, end), filters, between, snapshot, gap)

    def vitals(self, site_id: str, start: dt.date, end: dt.date, filters: Mapping[str, str]) -> VitalsReport:
        """The dashboard's vitals: the view without filters; with the page's filters, raw events (exact),
        read from the snapshot the dashboard's other reads keep (:meth:`raw_snapshot`)."""
        if not filters:
            return self.aggregate_vitals(site_id, start, end, shared=True)
        exact = tuple(Filter("is", dimension=API_FILTERS[k], values=(v,)) for k, v in filters.items())
        timezone = self.timezone(site_id)
        days = LocalDays(start, end, timezone)
        between = None if is_utc(timezone) else days.instants
        found = self.exact_vitals(
            site_id, *(days.utc_dates if between else (start, end)), filters=exact, between=between, shared=True
        )
        return found if found is not None else self.no_vitals(Range(start, end))  # no raw rows
