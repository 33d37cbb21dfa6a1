"""The sidebar: site, date range, comparison, filters, goals and funnel steps.

Widgets start from the view in the URL and the chosen view is written back to the URL, so the
address bar always holds a link to exactly what is on screen.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import replace
from typing import cast

import streamlit as st

from dashboard.view import MAX_FUNNEL_STEPS, PRESETS, Preset, View, range_label
from query.aggregates import Aggregates, Range, dimension_values
from query.goals import Step
from query.raw import FILTERS
from query.site_time import local_today

ANY = "(any)"


def _index(options: list[str], value: str | None) -> int:
    return options.index(value) if value in options else 0


def step_candidates(agg: Aggregates, site_id: str, days: Range, chosen: tuple[Step, ...]) -> list[str]:
    """Pages and custom events seen in the range, as 'page:/path' and 'event:name' choices."""
    pages = [f"page:{p}" for p in dimension_values(agg, site_id, days, "page", limit=100)]
    events = [f"event:{e}" for e in dimension_values(agg, site_id, days, "event", limit=50)]
    return list(dict.fromkeys([*map(str, chosen), *events, *pages]))


def sidebar(
    view: View, sites: list[str], agg: Aggregates, now: dt.datetime, *, timezone_of: Callable[[str], str]
) -> View:
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
    chosen_view = replace(view, site=site, preset=preset, start=start, end=end, compare=compare)
    days = Range(*chosen_view.dates(today))

    bar.subheader("Filters")
    filters: dict[str, str] = {}
    for key in FILTERS:
        options = [ANY, *dimension_values(agg, site, days, key)]
        current = view.filters.get(key)
        if current and current not in options:
            options.append(current)
        picked = bar.selectbox(key.capitalize(), options, index=_index(options, current), key=f"f_{key}")
        if picked != ANY:
            filters[key] = picked
    bar.caption(
        "A filter applies to every panel but custom properties; filtered figures are computed from raw events (exact)."
    )

    bar.subheader("Goals and funnel")
    candidates = step_candidates(agg, site, days, (*view.goals, *view.funnel))
    goals = bar.multiselect("Goals", candidates, default=[str(g) for g in view.goals], key="goals")
    funnel = bar.multiselect(
        f"Funnel steps (2–{MAX_FUNNEL_STEPS}, in order)",
        candidates,
        default=[str(s) for s in view.funnel],
        max_selections=MAX_FUNNEL_STEPS,
        key="funnel",
    )
    return replace(
        chosen_view,
        filters=filters,
        goals=tuple(Step.parse(g) for g in goals),
        funnel=tuple(Step.parse(s) for s in funnel),
    )
