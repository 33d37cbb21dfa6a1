"""The page's figures computed ahead, side by side, and kept while the tables they come from are unchanged.

A page run asks some thirty questions (totals, series, each top table, vitals, health). They are
started together in a thread pool before the first panel is drawn (:meth:`Answers.ask`), and
each panel waits only for its own: Streamlit elements are still drawn from the script thread
alone, in the page's order.

An answer is kept (:class:`AnswerCache`) under its question and the versions of the tables it is
read from (:func:`answer_key`): the next page run over unchanged tables draws it from memory, and
a new table version is a new key, so new data shows at the first page run that sees the new
version (the table snapshots themselves are refreshed every ``query.aggregates.REFRESH_SECONDS``).
Pure Python: no Streamlit, so it is unit-tested directly.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

import pandas as pd

from query.aggregates import AggregateReport, Aggregates
from query.raw import RawQuery
from query.vitals import AggregateVitals, ExactVitals
from query.zoned import ZonedVitals
from tally.tables import (
    EVENTS,
    PROPS_1D,
    RAW_PAGEVIEWS,
    SESSIONS,
    TRAFFIC_1D,
    TRAFFIC_1H,
    TRAFFIC_1M,
    VISITS_1D,
    VISITS_1H,
    VITALS_1H,
)

T = TypeVar("T")
Versions = tuple[tuple[str, int | None], ...]  # (table, version) pairs; None: the table does not exist yet


# The tables each kind of report reads; a report of another kind (a site's local days put together
# from UTC days, hours, minutes, sessions and raw events: query.zoned) is keyed on all of them.
AGGREGATE_TABLES = (TRAFFIC_1H.table, TRAFFIC_1D.table, VISITS_1H.table, VISITS_1D.table, PROPS_1D.table)
# What a views report's visit figures read besides: the open visits (query.open_visits), from raw
# events agg.events does not hold, up to the newest minute agg.traffic_1m counted.
OPEN_VISIT_TABLES = (RAW_PAGEVIEWS, EVENTS.table, TRAFFIC_1M.table)
VISIT_QUESTIONS = frozenset({"totals", "series", "top_visits"})  # the questions that count visits
EVERY_TABLE = (*AGGREGATE_TABLES, TRAFFIC_1M.table, SESSIONS.table, VITALS_1H.table, RAW_PAGEVIEWS, EVENTS.table)


def tables_read(report: object) -> tuple[str, ...]:
    """The tables whose versions key ``report``'s answers."""
    if isinstance(report, AggregateReport):
        return AGGREGATE_TABLES
    if isinstance(report, AggregateVitals | ZonedVitals):
        return (VITALS_1H.table,)
    if isinstance(report, RawQuery | ExactVitals):
        return (RAW_PAGEVIEWS,)
    return EVERY_TABLE


def answer_key(
    source: tuple[Hashable, ...], versions: Versions, question: str, *args: Hashable
) -> tuple[Hashable, ...]:
    """The key of one answer: what is asked (``question`` and its ``args``) of which report (``source``:
    its kind, site, dates, zone and filters) over which table versions."""
    return (source, versions, question, args)


def filters_key(filters: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """A page's filters as part of a key: the same filters in any order are one key."""
    return tuple(sorted(filters.items()))


class AnswerCache:
    """Answers by key, the newest ``max_entries`` kept; an answer still being computed is shared too,
    so two page runs asking the same question at once compute it once. A failed answer is not kept."""

    def __init__(self, *, max_entries: int = 1024) -> None:
        assert max_entries > 0, "the cache must hold at least one answer"
        self.max_entries = max_entries
        self._answers: OrderedDict[Hashable, Future[Any]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._answers)

    def answer(self, key: Hashable, compute: Callable[[], T], pool: Executor) -> Future[T]:
        """The answer kept under ``key``, or ``compute`` started in ``pool`` and kept under it."""
        with self._lock:
            found = self._answers.get(key)
            if found is not None:
                self._answers.move_to_end(key)
                return found
            future = pool.submit(compute)
            self._answers[key] = future
            while len(self._answers) > self.max_entries:
                self._answers.popitem(last=False)
        future.add_done_callback(lambda done: self._forget_failure(key, done))
        return future

    def _forget_failure(self, key: Hashable, done: Future[Any]) -> None:
        if done.cancelled() or done.exception() is not None:
            with self._lock:
                if self._answers.get(key) is done:
                    del self._answers[key]


def own_copy(value: T) -> T:
    """A kept answer as a page may change it: data frames are copied (a panel adds columns)."""
    return value.copy() if isinstance(value, pd.DataFrame) else value  # type: ignore[return-value]


class Answers:
    """One report's answers through an :class:`AnswerCache`: ``ask`` starts a question, ``get`` waits for it.

    ``source`` and ``versions`` name the report and the table versions it reads (:func:`answer_key`).
    """

    def __init__(
        self,
        report: Any,
        *,
        source: tuple[Hashable, ...],
        versions: Versions,
        cache: AnswerCache,
        pool: Executor,
        visit_versions: Versions | None = None,
    ) -> None:
        self.report = report
        self.source = source
        self.versions = versions
        # The versions the questions that count visits are kept under, when they read more tables.
        self.visit_versions = visit_versions if visit_versions is not None else versions
        self.cache = cache
        self.pool = pool
        self.exact: bool = report.exact

    def ask(self, question: str, *args: Hashable) -> Future[Any]:
        """Start computing ``report.<question>(*args)`` (or find it kept); return its future."""
        method = getattr(self.report, question)
        versions = self.visit_versions if question in VISIT_QUESTIONS else self.versions
        key = answer_key(self.source, versions, question, *args)
        return self.cache.answer(key, lambda: method(*args), self.pool)

    def get(self, question: str, *args: Hashable) -> Any:
        """The answer to ``report.<question>(*args)``, waited for; a page's own copy."""
        return own_copy(self.ask(question, *args).result())


class AnsweredReport(Answers):
    """A :class:`query.report.Report` (and a drill-down's funnel, a views report's property keys) whose
    answers come through the cache: the panels call it as they would call the report itself."""

    def totals(self) -> Any:
        return self.get("totals")

    def series(self, grain: str) -> pd.DataFrame:
        return self.get("series", grain)  # type: ignore[no-any-return]

    def top(self, dimension: str, limit: int = 10) -> pd.DataFrame:
        return self.get("top", dimension, limit)  # type: ignore[no-any-return]

    def top_visits(self, dimension: str, limit: int = 10) -> pd.DataFrame:
        return self.get("top_visits", dimension, limit)  # type: ignore[no-any-return]

    def goal(self, step: Any) -> Any:
        return self.get("goal", step)

    def props(self, key: str, limit: int = 10, name: str | None = None) -> pd.DataFrame:
        return self.get("props", key, limit, name)  # type: ignore[no-any-return]

    def property_keys(self) -> pd.DataFrame:
        return self.get("property_keys")  # type: ignore[no-any-return]

    def funnel(self, steps: tuple[Any, ...]) -> pd.DataFrame:
        return self.get("funnel", steps)  # type: ignore[no-any-return]


class AnsweredVitals(Answers):
    """A :class:`query.report.VitalsReport` whose answers come through the cache."""

    def vitals(self, dimension: str) -> list[Any]:
        return self.get("vitals", dimension)  # type: ignore[no-any-return]


class Asker:
    """Questions of one page run, answered through the process's cache and threads, keyed on the
    table versions of the aggregate reader's current snapshots (``agg``)."""

    def __init__(self, agg: Aggregates, cache: AnswerCache, pool: Executor) -> None:
        self.agg = agg
        self.cache = cache
        self.pool = pool

    def versions(self, tables: tuple[str, ...]) -> Versions:
        """The current version of each table (snapshots refreshed when due)."""
        return tuple((name, self.agg.version(name)) for name in tables)

    def versions_of(self, report: Any) -> Versions:
        """The versions ``report``'s answers are kept under: a raw-event report's own snapshot of
        raw.pageviews (the version it reads, even if the reader has loaded a newer one since), else
        the current version of each table it reads."""
        if isinstance(report, RawQuery | ExactVitals) and report.snapshot is not None:
            return ((RAW_PAGEVIEWS, report.snapshot[1]),)
        return self.versions(tables_read(report))

    def report(self, report: Any, source: tuple[Hashable, ...]) -> AnsweredReport:
        """``report`` answered through the cache; a views report's visit figures also under the
        versions of the tables its open visits are read from."""
        versions = self.versions_of(report)
        visit_versions = versions + self.versions(OPEN_VISIT_TABLES) if isinstance(report, AggregateReport) else None
        return AnsweredReport(
            report, source=source, versions=versions, cache=self.cache, pool=self.pool, visit_versions=visit_versions
        )

    def vitals(self, report: Any, source: tuple[Hashable, ...]) -> AnsweredVitals:
        """A vitals report answered through the cache."""
        versions = self.versions_of(report)
        return AnsweredVitals(report, source=source, versions=versions, cache=self.cache, pool=self.pool)

    def value(self, source: tuple[Hashable, ...], tables: tuple[str, ...], compute: Callable[[], T]) -> Future[T]:
        """Any other figure (``compute``) read from ``tables``, kept under ``source`` and their versions."""
        return self.cache.answer(answer_key(source, self.versions(tables), "value"), compute, self.pool)

    def recent(self, source: tuple[Hashable, ...], seconds: float, compute: Callable[[], T]) -> Future[T]:
        """A figure that changes without a new table version (Kafka's lag), kept for page runs in the same
        ``seconds``-long tick of the clock: at most that old, and read once for the runs in between."""
        tick = int(time.monotonic() // seconds)
        return self.cache.answer(answer_key(source, (("clock", tick),), "recent"), compute, self.pool)
