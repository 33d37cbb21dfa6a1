"""The sidebar: site, date range, comparison, and two menus: filters, and goals and funnel steps.

Widgets start from the view in the URL and the chosen view is written back to the URL, so the
address bar always holds a link to exactly what is on screen.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import replace
from typing import cast

import streamlit as st

from dashboard.answers import Asker
from dashboard.view import MAX_FUNNEL_STEPS, PRESETS, Preset, View, range_label
from query.aggregates import Range, dimension_values
from query.goals import Step
from query.site_time import local_today
from tally.dimensions import FILTERS
from tally.tables import TRAFFIC_1D

ANY = "(any)"


def _index(options: list[str], value: str | None) -> int:
    return options.index(value) if value in options else 0


PICKER_LIMITS = {**dict.fromkeys(FILTERS, 200), "step_page": 100, "step_event": 50}  # values offered per picker


def picker_values(ask: Asker, site_id: str, days: Range) -> dict[str, Future[list[str]]]:
    """The values every picker offers (the most viewed first), all started at once and kept until
    agg.traffic_1d changes: the filters' values, and the pages and events goals and funnels may use."""
    started = {}
    for picker, limit in PICKER_LIMITS.items():
        dimension = picker.removeprefix("step_")
        read = functools.partial(dimension_values, ask.agg, site_id, days, dimension, limit)
        source = ("dimension_values", site_id, days.start, days.end, dimension, limit)
        started[picker] = ask.value(source, (TRAFFIC_1D.table,), read)
    return started


def step_candidates(pages: list[str], events: list[str], chosen: tuple[Step, ...]) -> list[str]:
    """Pages and custom events seen in the range, as 'page:/path' and 'event:name' choices."""
    return list(dict.fromkeys([*map(str, chosen), *(f"event:{e}" for e in events), *(f"page:{p}" for p in pages)]))


# The filter and the goal pickers are in menus drawn only while open (a rerun opens one): a new tab
# draws 2 menu buttons instead of 9 pickers, about 0.15 s less of a warm load (docs/DASHBOARD.md).
# While a menu is closed, its part of the view is the URL's.
FILTERS_OPEN = "filters_open"
GOALS_OPEN = "goals_open"


def sidebar(view: View, sites: list[str], ask: Asker, now: dt.datetime, *, timezone_of: Callable[[str], str]) -> View:
    """Render the controls; return the view they describe. Dates are the chosen site's days in its
    zone (``timezone_of``: ``sites[].timezone``), and every range label names the zone."""
    bar = st.sidebar
    site = bar.selectbox("Site", sites, index=_index(sites, view.site), key="site")
    zone = timezone_of(site)
    today = local_today(zone, now)
    presets: list[str] = list(PRESETS)
    preset = cast(
        Preset,
        bar.selectbox(
            "Date range",
            presets,
            index=_index(presets, view.preset),
            format_func=lambda p: range_label(cast(Preset, p), zone),
            key="range",
        ),
    )
    start, end = view.start, view.end
    if preset == "custom":
        first, last = view.dates(today) if view.preset == "custom" else (today - dt.timedelta(days=6), today)
        chosen = bar.date_input(f"From – to ({zone})", value=(first, last), max_value=today, key="custom")
        if isinstance(chosen, tuple) and len(chosen) == 2:
            start, end = chosen
        else:
            start, end = first, last
    compare = bar.checkbox("Compare with the previous period", value=view.compare, key="compare")
    imports = bar.checkbox(
        "Include imported history",
        value=view.imports,
        key="imports",
        help="History brought in by `tally import` (days before this site's own events), drawn apart and marked.",
    )
    chosen_view = replace(view, site=site, preset=preset, start=start, end=end, compare=compare, imports=imports)
    days = Range(*chosen_view.dates(today))
    values = functools.cache(lambda: picker_values(ask, site, days))  # asked once, and only by an open menu

    filters = dict(view.filters)  # as in the URL while the menu is closed
    menu = bar.popover("Filters", key=FILTERS_OPEN, on_change="rerun", width="stretch")
    if menu.open:
        filters = {}
        for key in FILTERS:
            options = [ANY, *values()[key].result()]
            current = view.filters.get(key)
            if current and current not in options:
                options.append(current)
            picked = menu.selectbox(key.capitalize(), options, index=_index(options, current), key=f"f_{key}")
            if picked != ANY:
                filters[key] = picked
        menu.caption(
            "A filter applies to every panel but custom properties; filtered figures are computed from raw events"
            " (exact). The first filter on a range reads and sessionises its events once, which takes tens of"
            " seconds over millions of them; the filters after it on that range reuse them."
        )
    if filters:
        bar.caption(f"Filtered by {', '.join(filters)}.")  # the keys only: a value may be a visitor's text

    goals, funnel = view.goals, view.funnel
    menu = bar.popover("Goals and funnel", key=GOALS_OPEN, on_change="rerun", width="stretch")
    if menu.open:
        chosen_steps = (*view.goals, *view.funnel)
        candidates = step_candidates(values()["step_page"].result(), values()["step_event"].result(), chosen_steps)
        picked_goals = menu.multiselect("Goals", candidates, default=[str(g) for g in view.goals], key="goals")
        picked_steps = menu.multiselect(
            f"Funnel steps (2–{MAX_FUNNEL_STEPS}, in order)",
            candidates,
            default=[str(s) for s in view.funnel],
            max_selections=MAX_FUNNEL_STEPS,
            key="funnel",
        )
        goals = tuple(Step.parse(g) for g in picked_goals)
        funnel = tuple(Step.parse(s) for s in picked_steps)
    if goals or funnel:
        bar.caption(f"{len(goals)} goal(s), a funnel of {len(funnel)} step(s).")
    return replace(chosen_view, filters=filters, goals=goals, funnel=funnel)
