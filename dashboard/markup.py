"""The report's figures as HTML: each panel one ``st.html`` block instead of a dozen Streamlit elements.

A browser draws a page's elements one by one (React components, CSS-in-JS, a canvas grid per
``st.dataframe``); a warm page of about 70 of them took 1.6 s against 0.5 s for a bare Streamlit
page, most of it drawing (docs/BENCHMARKS.md, "Dashboard in a browser before the HTML panels"). A
table or a row of figures written as plain HTML is one element, drawn by the browser's own layout.

Every text shown here is escaped (``html.escape``, quotes included), so attacker-controlled text
(page paths, referrers, event names, property values) is shown as text, never read as markup;
Streamlit's DOMPurify is the second line. The functions are pure (figures in, a string out) and
unit-tested without Streamlit; the ``data-*`` attributes name what a test, e2e or unit, looks for.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote

import pandas as pd

# Colours that read on Streamlit's light and dark themes alike (greys as half-transparent black).
CSS = """<style>
.tly-cards{display:grid;grid-template-columns:repeat(var(--tly-n),minmax(0,1fr));gap:.75rem;margin:.25rem 0 .5rem}
@media (max-width:640px){.tly-cards{grid-template-columns:repeat(2,minmax(0,1fr))}}
.tly-card{padding:.25rem 0}
.tly-label{font-size:.875rem;opacity:.8}
.tly-value{display:block;font-size:1.9rem;line-height:1.3;overflow-wrap:anywhere}
.tly-delta{display:inline-block;font-size:.875rem;padding:0 .4rem;border-radius:.5rem}
.tly-up{color:#09ab3b;background:rgba(9,171,59,.1)}.tly-down{color:#ff2b2b;background:rgba(255,43,43,.1)}
.tly-note{font-size:.875rem;opacity:.7;margin:.1rem 0 .6rem}
.tly-grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(16rem,1fr));gap:1rem}
.tly-title{font-weight:600;margin:.2rem 0}
.tly-scroll{max-height:26rem;overflow:auto}
table.tly-table{border-collapse:collapse;width:100%;font-size:.875rem}
.tly-table th,.tly-table td{padding:.2rem .5rem;border-bottom:1px solid rgba(128,128,128,.25);text-align:left}
.tly-table th{font-weight:600}
.tly-table td.tly-n,.tly-table th.tly-n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.tly-table td{max-width:28rem;overflow-wrap:anywhere}
.tly-table td:not(.tly-n){min-width:6rem}
.tly-bars{display:grid;grid-template-columns:3.5rem 1fr;gap:.3rem .5rem;align-items:center;font-size:.8rem}
.tly-bar{display:flex;height:1.3rem;border-radius:.2rem;overflow:hidden}
.tly-bar span{display:block;height:100%}
.tly-legend span{display:inline-block;margin-right:1rem;font-size:.8rem}
.tly-legend i{display:inline-block;width:.7rem;height:.7rem;margin-right:.3rem;border-radius:.15rem}
.tly-plot{position:relative;height:18rem;margin:.5rem 1.5rem 1.8rem 3.6rem}
.tly-lines{position:absolute;inset:0;width:100%;height:100%}
.tly-y{position:absolute;right:100%;transform:translateY(50%);padding-right:.4rem;font-size:.75rem;opacity:.7}
.tly-x{position:absolute;top:100%;transform:translateX(-50%);padding-top:.3rem;font-size:.75rem;opacity:.7;white-space:nowrap}
.tly-x-title{text-align:center;font-size:.8rem;opacity:.7}
.tly-hover{position:absolute;top:0;bottom:0}
.tly-hover:hover{background:rgba(128,128,128,.12)}
.tly-mark{position:absolute;top:0;bottom:0;border-left:1px dashed gray}
.tly-mark span{position:absolute;top:0;left:.2rem;font-size:.75rem;color:gray;white-space:nowrap}
</style>"""

EMPTY = "–"  # a figure with nothing to show (no data, or a division by zero)


def text(value: object) -> str:
    """Any value as escaped text (quotes too: it may end up in an attribute)."""
    return html.escape(str(value), quote=True)


Format = Literal["whole", "number", "percent", "text"]
COLOUR = re.compile(
    r"#[0-9a-fA-F]{6}"
)  # the only colours drawn: they go into style attributes, which escaping does not guard


def colour(value: str) -> str:
    """``value``, checked to be a ``#rrggbb`` colour (a programmer's constant, never a visitor's text)."""
    assert COLOUR.fullmatch(value), f"not a #rrggbb colour: {value!r}"
    return value


def cell(value: object, kind: Format = "number") -> str:
    """One table cell's text, as people read it: ``12,345`` (whole), ``3.25`` (number), ``42.0%``
    (percent); missing values ``–``."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA or value is pd.NaT:
        return EMPTY
    if hasattr(value, "item") and not isinstance(value, int | float | str):  # a numpy scalar
        return cell(value.item(), kind)
    if kind == "percent" and isinstance(value, int | float):
        return f"{value:.1%}"
    if isinstance(value, bool) or kind == "text":
        return text(value)
    if isinstance(value, int | float):
        return f"{value:,.0f}" if kind == "whole" else f"{value:,.2f}"
    return text(value)


def _whole_numbers(series: pd.Series) -> bool:
    """Whether every value of a numeric column is a whole number (counts; a gap makes a column float)."""
    values = series.dropna()
    return bool(pd.api.types.is_integer_dtype(series) or (values == values.round()).all())


def _is_number(series: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)


def table(frame: pd.DataFrame, *, name: str, percent: Collection[str] = ()) -> str:
    """``frame`` as an HTML table (header, then one row per row; numbers right-aligned), in a box that
    scrolls past about 15 rows. ``percent`` names the columns holding fractions shown as %."""
    numeric = {c for c in frame.columns if _is_number(frame[c])}
    kinds: dict[object, Format] = {
        c: "percent"
        if c in percent
        else ("whole" if _whole_numbers(frame[c]) else "number")
        if c in numeric
        else "text"
        for c in frame.columns
    }
    head = "".join(f"<th{' class=tly-n' if c in numeric else ''}>{text(c)}</th>" for c in frame.columns)
    rows = []
    for values in frame.itertuples(index=False, name=None):
        cells = (
            f"<td{' class=tly-n' if c in numeric else ''}>{cell(v, kinds[c])}</td>"
            for c, v in zip(frame.columns, values, strict=True)
        )
        rows.append(f"<tr>{''.join(cells)}</tr>")
    return (
        f'<div class="tly-scroll"><table class="tly-table" data-table="{text(name)}">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
    )


def titled(title: str, body: str) -> str:
    """A bold title over ``body`` (a table, or a note that it is empty)."""
    return f'<div><div class="tly-title">{text(title)}</div>{body}</div>'


def note(words: str) -> str:
    """A small grey line, like ``st.caption`` (plain text: no Markdown)."""
    return f'<div class="tly-note">{text(words)}</div>'


def grid(parts: Iterable[str]) -> str:
    """Parts side by side, as many as fit (16 rem each at least): three tables on a wide screen, one on a phone."""
    return f'<div class="tly-grid">{"".join(parts)}</div>'


@dataclass(frozen=True)
class Card:
    """One headline figure, as ``st.metric`` shows it: label, value, change against the previous period."""

    label: str
    value: str
    change: str | None = None  # "+12.5%": green when up, red when down (the other way round when ``inverse``)
    inverse: bool = False
    help: str = ""  # shown on hover
    band: str = ""  # a band's label under the value, and its colour (Core Web Vitals)
    colour: str = ""


def _change(card: Card) -> str:
    if not card.change:
        return ""
    up = not card.change.startswith("-")
    good = up != card.inverse
    arrow = "↑" if up else "↓"
    return f'<span class="tly-delta {"tly-up" if good else "tly-down"}">{arrow} {text(card.change.lstrip("+-"))}</span>'


def cards(shown: Sequence[Card], *, per_row: int) -> str:
    """A row (or rows) of headline figures, ``per_row`` to a row."""
    parts = []
    for c in shown:
        hint = f' title="{text(c.help)}"' if c.help else ""
        band = f'<div style="color:{colour(c.colour)}">{text(c.band)}</div>' if c.band else ""
        parts.append(
            f'<div class="tly-card" data-kpi="{text(c.label)}"{hint}><span class="tly-label">{text(c.label)}</span>'
            f'<span class="tly-value" data-value>{text(c.value)}</span>{_change(c)}{band}</div>'
        )
    return f'<div class="tly-cards" style="--tly-n:{int(per_row)}">{"".join(parts)}</div>'


@dataclass(frozen=True)
class Segment:
    """A part of a 100% bar: its label, its share (0–100) and its colour."""

    label: str
    share: float
    colour: str


def bars(rows: Sequence[tuple[str, Sequence[Segment]]], legend: Sequence[tuple[str, str]]) -> str:
    """Stacked horizontal bars of shares (each row sums to about 100), with a legend of (label, colour)."""
    lines = []
    for label, segments in rows:
        spans = "".join(
            f'<span style="width:{max(0.0, min(100.0, s.share)):.2f}%;background:{colour(s.colour)}"'
            f' title="{text(s.label)}: {s.share:.1f}%"></span>'
            for s in segments
        )
        lines.append(f'<div>{text(label)}</div><div class="tly-bar" data-bar="{text(label)}">{spans}</div>')
    keys = "".join(f'<span><i style="background:{colour(c)}"></i>{text(n)}</span>' for n, c in legend)
    return f'<div class="tly-bars">{"".join(lines)}</div><div class="tly-legend">{keys}</div>'


def block(*parts: str) -> str:
    """One ``st.html`` body: the style sheet, then the parts (each element carries its own style sheet, so
    a fragment rerun alone is styled too; the browser dedupes nothing but the cost is a kilobyte)."""
    return CSS + "".join(parts)


@dataclass(frozen=True)
class Line:
    """One series of a line chart: its name (the legend's and the tooltip's), colour and values (None: a gap)."""

    name: str
    colour: str
    values: Sequence[float | None]


def nice_top(largest: float) -> tuple[float, float]:
    """The top of a count axis from 0 over ``largest`` and its step: 1, 2 or 5 times a power of ten (1 at
    least: counts are whole), about 5 steps."""
    raw = max(largest / 5, 1.0)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    return step * max(1, math.ceil(largest / step)), step


def _position(i: int, n: int) -> float:
    """The x of bucket ``i`` of ``n``, in % of the plot's width."""
    return 50.0 if n == 1 else 100.0 * i / (n - 1)


def _polylines(values: Sequence[float | None], top: float) -> list[str]:
    """The SVG points of each unbroken run of values (a 1000 × 1000 box, y upwards from 0)."""
    runs: list[list[str]] = [[]]
    n = len(values)
    for i, v in enumerate(values):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            runs.append([])
            continue
        runs[-1].append(f"{_position(i, n) * 10:.1f},{1000 - 1000 * v / top:.1f}")
    return [" ".join(r) for r in runs if r]


def svg_image(drawing: str) -> str:
    """A data URL of an SVG image of ``drawing`` in a 1000 × 1000 box stretched to the image's size.

    An image, not inline SVG: Streamlit's sanitiser (DOMPurify's HTML profile) drops ``<svg>``, and
    keeps an ``<img>``'s data URL. Only numbers and this module's colours are drawn in it, no text."""
    box = 'width="1000" height="1000" viewBox="0 0 1000 1000" preserveAspectRatio="none"'
    svg = f'<svg xmlns="http://www.w3.org/2000/svg" {box}>{drawing}</svg>'
    return "data:image/svg+xml," + quote(svg, safe=" ,.:=/()")


def line_chart(
    labels: Sequence[str],
    lines: Sequence[Line],
    *,
    ticks: Sequence[int],
    tick_labels: Sequence[str],
    x_title: str,
    notes: Sequence[tuple[float, str]] = (),
) -> str:
    """A line chart of buckets (``labels``: each bucket's name, shown on hover with every line's value):
    lines drawn in an SVG image (scaled to the width, strokes not), the axes' labels, the legend and the notes
    (dashed rules at a fraction 0–1 of the width, with their text) in HTML, so text keeps its size on
    any screen. ``ticks`` are the bucket indices labelled on the time axis (``tick_labels``)."""
    n = len(labels)
    largest = max((v for line in lines for v in line.values if v is not None and not math.isnan(v)), default=0.0)
    top, step = nice_top(largest)
    levels = [k * step for k in range(round(top / step) + 1)]  # the value axis's labelled values
    grid_lines = "".join(
        f'<line x1="0" x2="1000" y1="{y:.1f}" y2="{y:.1f}" stroke="rgba(128,128,128,.25)"'
        ' vector-effect="non-scaling-stroke"/>'
        for y in (1000 - 1000 * level / top for level in levels)
    )
    paths = "".join(
        f'<polyline points="{points}" fill="none" stroke="{colour(line.colour)}" stroke-width="2"'
        ' vector-effect="non-scaling-stroke"/>'
        for line in lines
        for points in _polylines(line.values, top)
    )
    y_labels = "".join(
        f'<span class="tly-y" style="bottom:{100 * level / top:.2f}%">{cell(level, "whole")}</span>' for level in levels
    )
    x_labels = "".join(
        f'<span class="tly-x" style="left:{_position(i, n):.2f}%">{text(label)}</span>'
        for i, label in zip(ticks, tick_labels, strict=True)
    )
    width = 100.0 / max(n - 1, 1)
    hovers = "".join(
        f'<div class="tly-hover" style="left:{max(0.0, _position(i, n) - width / 2):.2f}%;width:{width:.2f}%"'
        f' title="{text(label)}&#10;'
        + "&#10;".join(f"{text(line.name)}: {cell(line.values[i], 'whole')}" for line in lines)
        + '"></div>'
        for i, label in enumerate(labels)
    )
    marks = "".join(
        f'<div class="tly-mark" style="left:{100 * f:.2f}%" title="{text(words)}"><span>{text(words)}</span></div>'
        for f, words in notes
        if 0 <= f <= 1
    )
    legend = "".join(
        f'<span><i style="background:{colour(line.colour)}"></i>{text(line.name)}</span>' for line in lines
    )
    return (
        f'<div class="tly-chart" data-chart><div class="tly-legend">{legend}</div><div class="tly-plot">'
        f'<img class="tly-lines" alt="" src="{svg_image(grid_lines + paths)}">'
        f'{y_labels}{x_labels}{marks}{hovers}</div><div class="tly-x-title">{text(x_title)}</div></div>'
    )
