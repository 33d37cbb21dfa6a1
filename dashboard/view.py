"""What the page shows: site, date range, comparison, filters, funnel and goals.

A :class:`View` round-trips through the URL's query parameters, so a link reproduces the
page exactly. Pure code: no Streamlit, no I/O, so it is unit-tested directly.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from query.goals import Step
from query.spec import QueryError
from tally.dimensions import FILTERS

Preset = Literal["today", "7d", "30d", "90d", "custom"]
PRESETS: dict[Preset, str] = {
    "today": "Today",
    "7d": "Last 7 days",
    "30d": "Last 30 days",
    "90d": "Last 90 days",
    "custom": "Custom range",
}
_PRESET_DAYS: dict[Preset, int] = {"today": 1, "7d": 7, "30d": 30, "90d": 90}


def range_label(preset: Preset, timezone: str) -> str:
    """A preset's label with the zone its days are counted in: ``Today (Asia/Kolkata)``."""
    return f"{PRESETS[preset]} ({timezone})"


# Every query parameter a view uses (anything else in a URL is ignored).
QUERY_KEYS = frozenset({"site", "range", "from", "to", "compare", "goals", "funnel", *(f"f_{k}" for k in FILTERS)})
MAX_FUNNEL_STEPS = 5
MAX_RANGE_DAYS = 400


class ViewError(ValueError):
    """A query parameter the page cannot use; the message says which and why.

    ``str()`` also quotes the bad value, for the command line (``tally share create --view``).
    ``problem`` leaves it out, for the page: the value comes from a URL anyone can craft, and
    ``st.error`` would render it as Markdown (links, images).
    """

    def __init__(self, problem: str, value: str | None = None) -> None:
        super().__init__(problem if value is None else f"{problem}, got {value!r}")
        self.problem = problem


@dataclass(frozen=True)
class View:
    site: str
    preset: Preset = "7d"
    start: dt.date | None = None  # custom range only (inclusive)
    end: dt.date | None = None
    compare: bool = True
    filters: Mapping[str, str] = field(default_factory=dict)
    funnel: tuple[Step, ...] = ()
    goals: tuple[Step, ...] = ()
    imports: bool = True  # imported history (tally import) shown in the chart and its own tables

    def dates(self, today: dt.date) -> tuple[dt.date, dt.date]:
        """The chosen range as inclusive dates of the site's days (``today`` is the site's local date)."""
        if self.preset == "custom":
            assert self.start and self.end, "a custom range has start and end"
            return self.start, self.end
        return today - dt.timedelta(days=_PRESET_DAYS[self.preset] - 1), today

    def previous(self, today: dt.date) -> tuple[dt.date, dt.date]:
        """The period of the same length just before the chosen range (for comparison)."""
        start, end = self.dates(today)
        days = (end - start).days + 1
        return start - dt.timedelta(days=days), start - dt.timedelta(days=1)

    def grain(self, today: dt.date) -> Literal["hour", "day"]:
        """Hours for ranges of up to two days, days beyond."""
        start, end = self.dates(today)
        return "hour" if (end - start).days < 2 else "day"

    @property
    def filtered(self) -> bool:
        return bool(self.filters)

    def with_filter(self, key: str, value: str | None) -> View:
        filters = {k: v for k, v in self.filters.items() if k != key}
        if value is not None:
            filters[key] = value
        return replace(self, filters=filters)


def _date(key: str, text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError as e:
        raise ViewError(f"{key} must be a date like 2026-11-01", text) from e


def _steps(key: str, text: str) -> tuple[Step, ...]:
    try:
        return tuple(Step.parse(part) for part in text.split(",") if part) if text else ()
    except QueryError as e:
        raise ViewError(str(e), text) from e


def from_query(params: Mapping[str, str], *, default_site: str) -> View:
    """Build a view from URL query parameters; unknown keys are ignored, bad values raise ViewError."""
    preset = params.get("range", "7d")
    if preset not in PRESETS:
        raise ViewError(f"range must be one of {', '.join(PRESETS)}", preset)
    start = end = None
    if preset == "custom":
        if "from" not in params or "to" not in params:
            raise ViewError("a custom range needs both 'from' and 'to' dates")
        start, end = _date("from", params["from"]), _date("to", params["to"])
        if end < start:
            raise ViewError(f"'to' ({end}) is before 'from' ({start})")
        if (end - start).days >= MAX_RANGE_DAYS:
            raise ViewError(f"a range may span at most {MAX_RANGE_DAYS} days")
    funnel = _steps("funnel", params.get("funnel", ""))
    if len(funnel) > MAX_FUNNEL_STEPS:
        raise ViewError(f"a funnel has at most {MAX_FUNNEL_STEPS} steps, got {len(funnel)}")
    return View(
        site=params.get("site", default_site),
        preset=preset,  # type: ignore[arg-type]
        start=start,
        end=end,
        compare=params.get("compare", "1") != "0",
        filters={key: params[f"f_{key}"] for key in FILTERS if params.get(f"f_{key}")},
        funnel=funnel,
        goals=_steps("goals", params.get("goals", "")),
        imports=params.get("imports", "1") != "0",
    )


def to_query(view: View) -> dict[str, str]:
    """The query parameters that reproduce ``view`` (defaults left out, so links stay short)."""
    params = {"site": view.site, "range": view.preset}
    if view.preset == "custom" and view.start and view.end:
        params |= {"from": view.start.isoformat(), "to": view.end.isoformat()}
    if not view.compare:
        params["compare"] = "0"
    if not view.imports:
        params["imports"] = "0"
    params |= {f"f_{key}": value for key, value in sorted(view.filters.items())}
    if view.funnel:
        params["funnel"] = ",".join(map(str, view.funnel))
    if view.goals:
        params["goals"] = ",".join(map(str, view.goals))
    return params
