"""Read the figures the dashboard draws as HTML (:mod:`dashboard.markup`) back out of an AppTest run:
headline cards by label, tables by name, as the text a person sees (a parser, not string matching)."""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any

import pandas as pd


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.cards: dict[str, str] = {}
        self.bands: dict[str, str] = {}
        self.tables: dict[str, list[list[str]]] = {}
        self.words: list[str] = []
        self.titles: list[str] = []
        self.charts = 0  # line charts and band bars drawn
        self._in_title = False
        self._card: str | None = None
        self._in_value = False
        self._in_band = False
        self._table: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "style":
            self._style = True
        if "data-chart" in a or a.get("class") == "tly-bars":
            self.charts += 1
        if tag == "div" and a.get("class") == "tly-title":
            self._in_title = True
            self.titles.append("")
        if "data-kpi" in a:
            self._card = a["data-kpi"]
        elif "data-value" in a and self._card is not None:
            self._in_value = True
            self.cards[self._card] = ""
        elif tag == "div" and self._card is not None and (a.get("style") or "").startswith("color:"):
            self._in_band = True
            self.bands[self._card] = ""
        name = a.get("data-table")
        if tag == "table" and name:
            self._table = name
            self.tables[name] = []
        elif tag == "tr" and self._table is not None:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "style":
            self._style = False
        if tag == "div" and self._in_title:
            self._in_title = False
        if tag == "span" and self._in_value:
            self._in_value = False
        if tag == "div" and self._in_band:
            self._in_band = False
            self._card = None
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell))
            self._cell = None
        elif tag == "tr" and self._row is not None and self._table is not None:
            self.tables[self._table].append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data: str) -> None:
        if self._style:
            return
        self.words.append(data)
        if self._in_title:
            self.titles[-1] += data
        if self._in_value and self._card is not None:
            self.cards[self._card] += data
        if self._in_band and self._card is not None:
            self.bands[self._card] += data
        if self._cell is not None:
            self._cell.append(data)


def _read(app: Any) -> _Reader:
    reader = _Reader()
    for element in app.get("html"):
        reader.feed(element.proto.body)
    return reader


def cards(app: Any) -> dict[str, str]:
    """Every headline figure drawn, label -> value as shown."""
    return _read(app).cards


def bands(app: Any) -> dict[str, str]:
    """The band under each figure that has one (Core Web Vitals), label -> band."""
    return _read(app).bands


def tables(app: Any) -> dict[str, pd.DataFrame]:
    """Every table drawn, by its name (``data-table``), as text cells under its header."""
    found = {}
    for name, rows in _read(app).tables.items():
        found[name] = pd.DataFrame(rows[1:], columns=rows[0]) if rows else pd.DataFrame()
    return found


def titles(app: Any) -> list[str]:
    """The titles over the tables drawn, in order."""
    return _read(app).titles


def figures_shown(app: Any) -> bool:
    """Whether any figure is on the page: a Streamlit metric or table, or a card, table or chart of ours."""
    reader = _read(app)
    return bool(app.metric or app.dataframe or reader.cards or reader.tables or reader.charts)


def text(app: Any) -> str:
    """All the text of the HTML blocks (no markup, no style sheet)."""
    return " ".join(_read(app).words)
