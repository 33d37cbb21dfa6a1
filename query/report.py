"""What a report answers, whichever source it reads: the aggregate tables or raw events.

:class:`query.aggregates.AggregateReport` (approximate visitors from HLL sketches) and
:class:`query.raw.RawQuery` (exact, DuckDB over ``raw.pageviews``) both have these methods, so the
dashboard's panels and the API's engine do not care which one answers. Core Web Vitals and scroll
depth answer to :class:`VitalsReport` the same way (:mod:`query.vitals`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import pandas as pd

from tally.sketches import Estimate

if TYPE_CHECKING:
    from query.aggregates import Totals
    from query.goals import Step
    from query.vitals import VitalFigures


class Report(Protocol):
    """The figures of one site over one range of dates."""

    exact: bool

    def totals(self) -> Totals: ...
    def series(self, grain: str) -> pd.DataFrame: ...
    def top(self, dimension: str, limit: int = 10) -> pd.DataFrame: ...
    def top_visits(self, dimension: str, limit: int = 10) -> pd.DataFrame: ...
    def goal(self, step: Step) -> Estimate: ...
    def props(self, key: str, limit: int = 10, name: str | None = None) -> pd.DataFrame: ...


class VitalsReport(Protocol):
    """Core Web Vitals and scroll depth of one site over one range (:mod:`query.vitals`)."""

    exact: bool

    def vitals(self, dimension: str) -> list[VitalFigures]: ...
