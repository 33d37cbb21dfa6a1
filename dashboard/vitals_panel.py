"""The Core Web Vitals panel: each vital's p75 in Google's band colour, the share of page views in
each band, and the same by page and by device; plus the scroll depth the top pages table shows.

Every figure comes from the query layer (:mod:`query.vitals`, through a
:class:`query.report.VitalsReport`); this module only lays them out. Its table builders are pure
(pandas in, pandas out) so they are unit-tested without Streamlit.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from dashboard import markup
from dashboard.markup import Card, Segment
from query.report import VitalsReport
from query.vitals import P75_RANK_ERROR, VitalFigures
from tally.settings import Settings
from tally.vitals import BANDS, VITALS, Band, Vital

# Google's own colours for the bands (PageSpeed Insights, CrUX).
BAND_COLOURS: dict[Band, str] = {"good": "#0cce6b", "needs_improvement": "#ffa400", "poor": "#ff4e42"}
BAND_LABELS: dict[Band, str] = {"good": "Good", "needs_improvement": "Needs improvement", "poor": "Poor"}
VITAL_TITLES = {
    "lcp": "Largest Contentful Paint",
    "inp": "Interaction to Next Paint",
    "cls": "Cumulative Layout Shift",
    "fcp": "First Contentful Paint",
    "ttfb": "Time to First Byte",
}


@dataclass(frozen=True)
class VitalsShown:
    """The vitals of the page's site and range, read once: the total, per page, per device."""

    exact: bool
    total: VitalFigures | None
    pages: list[VitalFigures]
    devices: list[VitalFigures]

    @property
    def measured(self) -> bool:
        return self.total is not None and self.total.measured > 0

    def scroll_depths(self) -> dict[str, int]:
        """Average scroll depth (whole %) per page, for the pages that sent one."""
        return {f.value: round(depth) for f in self.pages if (depth := f.scroll_depth) is not None}


def read(report: VitalsReport) -> VitalsShown:
    """The figures the panel and the top pages table show."""
    total = report.vitals("all")
    return VitalsShown(report.exact, total[0] if total else None, report.vitals("page"), report.vitals("device"))


def p75_text(vital: Vital, value: float | None) -> str:
    """A p75 as people read it: ``2,513 ms`` or, for CLS, ``0.12``; ``–`` when nothing was measured."""
    if value is None:
        return "–"
    return f"{value:.2f}" if vital.unit == "" else f"{value:,.0f} {vital.unit}"


def shares_frame(total: VitalFigures) -> pd.DataFrame:
    """Long rows (vital, band, share %) of the site total, for the stacked bars."""
    rows = []
    for v in VITALS:
        for band in BANDS:
            share = total.metric(f"{v.name}_{band}")
            if share is not None:
                rows.append({"vital": v.name.upper(), "band": BAND_LABELS[band], "share": share})
    return pd.DataFrame(rows, columns=["vital", "band", "share"])


def band_bars(total: VitalFigures) -> str:
    """Each vital's shares of page views in Google's bands, as stacked bars in the bands' colours."""
    colours = {BAND_LABELS[b]: BAND_COLOURS[b] for b in BANDS}
    frame = shares_frame(total)
    rows = [
        (vital, [Segment(r.band, float(r.share), colours[r.band]) for r in group.itertuples()])
        for vital, group in frame.groupby("vital", sort=False)
    ]
    return markup.titled("% of measured page views", markup.bars(rows, list(colours.items())))


def breakdown(figures: list[VitalFigures], value_label: str) -> pd.DataFrame:
    """One row per page or device: page views measured, each vital's p75 and its good / needs
    improvement / poor shares (``72 / 20 / 8 %``), and the average scroll depth."""
    rows = []
    for f in sorted(figures, key=lambda f: (-f.measured, f.value)):
        row: dict[str, object] = {value_label: f.value, "Measured page views": f.measured}
        for v in VITALS:
            shares = [f.metric(f"{v.name}_{b}") for b in BANDS]
            row[f"{v.name.upper()} p75"] = p75_text(v, f.p75.get(v.name))
            row[f"{v.name.upper()} good / NI / poor"] = (
                " / ".join(f"{s:.0f}" for s in shares if s is not None) + " %" if shares[0] is not None else "–"
            )
        depth = f.metric("scroll_depth")
        row["Scroll depth"] = f"{depth} %" if depth is not None else "–"
        rows.append(row)
    return pd.DataFrame(rows)


def vitals_tag(settings: Settings, site_id: str) -> str:
    """The script tag that loads the vitals extension beside the core snippet."""
    return f'<script defer data-site="{site_id}" src="http://{settings.ingest.host}:{settings.ingest.port}/t.vitals.js"></script>'


VITALS_TAB_KEY = "vitals_tab"  # the breakdown tabs' widget key


def code_span(text: str) -> str:
    """``text`` as a Markdown code span, shown as it is whatever backticks it holds (CommonMark: the
    fence is one backtick longer than the longest run inside, and the spaces around it are dropped)."""
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * (longest + 1)
    return f"{fence} {text} {fence}"


def core_web_vitals(
    shown: VitalsShown, *, tag: str, breakdowns_in: Callable[[Callable[[], None]], None] | None = None
) -> None:
    """The panel: p75 per vital in its band's colour, band shares, and the by-page and by-device tables
    (drawn by ``breakdowns_in``: the page runs them in a fragment, so picking a tab reruns them alone)."""
    st.subheader("Core Web Vitals")
    if not shown.measured or shown.total is None:
        st.info(
            "No Core Web Vitals were measured in this range. Add t.vitals.js next to the snippet "
            "(your ingest address in place of this one's if it is behind a proxy):"
        )
        # Inline code, not st.code: a code block loads the browser's syntax highlighter (1.5 MB of script
        # registering every language: about 0.7 s of a new tab's time on this machine, docs/BENCHMARKS.md).
        st.markdown(code_span(tag))
        return
    total = shown.total
    shown_cards = []
    for v in VITALS:
        p75 = total.p75.get(v.name)
        band = v.band(p75) if p75 is not None else None
        shown_cards.append(
            Card(
                f"{v.name.upper()} p75",
                p75_text(v, p75),
                help=f"{VITAL_TITLES[v.name]}: good ≤ {v.good_max:g}{v.unit}, poor > {v.poor_above:g}{v.unit}.",
                band=BAND_LABELS[band] if band else "",
                colour=BAND_COLOURS[band] if band else "",
            )
        )
    st.html(
        markup.block(
            markup.cards(shown_cards, per_row=len(VITALS)),
            band_bars(total),
            markup.note(caption(shown.exact, total.measured)),
        )
    )
    if breakdowns_in is None:
        breakdowns(shown)
    else:
        breakdowns_in(lambda: breakdowns(shown))


def breakdowns(shown: VitalsShown) -> None:
    """The by-page and by-device tables: only the open tab's is drawn (both were read with the panel)."""
    by_page, by_device = st.tabs(["By page", "By device"], key=VITALS_TAB_KEY, on_change="rerun")
    if by_page.open:
        with by_page:
            st.html(markup.block(markup.table(breakdown(shown.pages, "Page"), name="vitals_by_page")))
    if by_device.open:
        with by_device:
            st.html(markup.block(markup.table(breakdown(shown.devices, "Device"), name="vitals_by_device")))


def caption(exact: bool, measured: int) -> str:
    """What the panel's figures are: exact drill-down, or p75 approximate with its bound."""
    if exact:
        return f"{measured:,} page views measured. Exact, from raw events (drill-down)."
    return (
        f"{measured:,} page views measured. p75 approximate (t-digest, ±{P75_RANK_ERROR:.1%} in rank: merged hourly"
        " digests of agg.vitals_1h); the shares of page views in Google's bands and scroll depth are exact counts."
        " A band's share is of the page views that measured that vital (INP needs an interaction)."
    )
