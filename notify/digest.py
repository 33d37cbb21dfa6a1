"""A report's figures: one site over one period, with the change against the previous period.

Every figure is read through the query layer exactly as the dashboard reads it
(``Sources.aggregate_report(...).totals()`` and ``.top(...)``), and the change is the dashboard's:
``(now - before) / before`` against the range of the same length just before, none when the
previous figure is zero or missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from notify.health import Health
from notify.periods import previous_period
from query.aggregates import Range, Totals
from query.sources import Sources

TOP_LIMIT = 5


@dataclass(frozen=True)
class Figures:
    """The KPIs of one range, as the dashboard's KPI row shows them."""

    visitors: float  # ≈ unique visitors (HLL union; visitor ids rotate daily)
    visitors_bound: float  # its relative 95% bound
    pageviews: int
    visits: int
    bounce_rate: float | None
    visit_duration_s: float | None

    @classmethod
    def of(cls, totals: Totals) -> Figures:
        return cls(
            visitors=totals.visitors.value,
            visitors_bound=totals.visitors.relative_error,
            pageviews=totals.pageviews,
            visits=totals.visits,
            bounce_rate=totals.bounce_rate,
            visit_duration_s=totals.avg_duration_s,
        )


METRICS = ("visitors", "pageviews", "visits", "bounce_rate", "visit_duration_s")


def change(now: float | None, before: float | None) -> float | None:
    """The dashboard's change: relative to the previous period; None when it was zero or missing."""
    if now is None or before is None or before == 0:
        return None
    return (now - before) / before


@dataclass(frozen=True)
class TopRow:
    value: str
    pageviews: int
    visitors: int


@dataclass(frozen=True)
class Digest:
    """What a scheduled report says about one site and period."""

    site: str
    period: str  # weekly | monthly
    days: Range
    previous: Range
    current: Figures
    before: Figures
    top_pages: tuple[TopRow, ...]
    top_sources: tuple[TopRow, ...]
    health: Health
    timezone: str = "UTC"  # the zone the dates are the site's days in (sites[].timezone)

    def change(self, metric: str) -> float | None:
        """The change of one of :data:`METRICS` against the previous period."""
        return change(getattr(self.current, metric), getattr(self.before, metric))

    def as_data(self) -> dict[str, Any]:
        """Every figure as plain JSON values (the webhook's ``tally`` field)."""
        return {
            "kind": "report",
            "site": self.site,
            "period": self.period,
            "from": self.days.start.isoformat(),
            "to": self.days.end.isoformat(),
            "previous_from": self.previous.start.isoformat(),
            "previous_to": self.previous.end.isoformat(),
            "figures": {m: getattr(self.current, m) for m in METRICS},
            "visitors_bound": self.current.visitors_bound,
            "previous": {m: getattr(self.before, m) for m in METRICS},
            "change": {m: self.change(m) for m in METRICS},
            "top_pages": [vars(r) for r in self.top_pages],
            "top_sources": [vars(r) for r in self.top_sources],
            "health": {"status": self.health.status, "problems": self.health.problems},
        }


def _top(frame: Any) -> tuple[TopRow, ...]:
    return tuple(TopRow(str(r["value"]), int(r["pageviews"]), int(r["visitors"])) for r in frame.to_dict("records"))


def compose(sources: Sources, site: str, period: str, days: Range, health: Health) -> Digest:
    """The digest of ``site`` over ``days`` from the aggregate tables, as the dashboard reads them."""
    previous = previous_period(days)
    report = sources.aggregate_report(site, days.start, days.end)
    before = sources.aggregate_report(site, previous.start, previous.end)
    return Digest(
        site=site,
        period=period,
        days=days,
        previous=previous,
        current=Figures.of(report.totals()),
        before=Figures.of(before.totals()),
        top_pages=_top(report.top("page", limit=TOP_LIMIT)),
        top_sources=_top(report.top("source", limit=TOP_LIMIT)),
        health=health,
        timezone=sources.timezone(site),
    )
