"""The dashboard's HTML panels (dashboard/markup.py): hostile text stays text, figures read as people read them."""

from __future__ import annotations

from html.parser import HTMLParser

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dashboard import markup
from dashboard.markup import Card, Segment

HOSTILE = [
    "/<img src=x onerror=window.__xss=1>",
    '"><script>alert(1)</script>',
    "' onmouseover='alert(1)",
    "</td></tr></table><iframe src=//evil.example>",
    "&lt;b&gt;already escaped&lt;/b&gt;",
]


class Elements(HTMLParser):
    """Every start tag and every attribute of a piece of HTML, and its text as a browser shows it."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attributes: list[tuple[str, str | None]] = []
        self.data: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attributes += attrs

    def handle_data(self, data: str) -> None:
        self.data.append(data)


def parsed(body: str) -> Elements:
    reader = Elements()
    reader.feed(body)
    return reader


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_text_in_a_table_is_shown_as_text_and_makes_no_element(hostile: str) -> None:
    frame = pd.DataFrame({"Page": [hostile], "visitors": [3]})
    body = markup.block(markup.titled(hostile, markup.table(frame.rename(columns={"Page": hostile}), name=hostile)))
    elements = parsed(body)
    assert set(elements.tags) <= {"style", "div", "table", "thead", "tbody", "tr", "th", "td"}
    assert not [name for name, _ in elements.attributes if name.startswith("on") or name in ("src", "href")]
    assert elements.data.count(hostile) == 3, "the title, the column's name and the cell show it as it is"


@given(st.text())
def test_any_text_in_a_card_is_one_card_whose_value_reads_back_as_given(value: str) -> None:
    elements = parsed(markup.cards([Card(value, value, help=value, band=value, colour=value)], per_row=3))
    assert elements.tags == ["div", "div", "span", "span"] + (["div"] if value else [])  # a band only when given
    assert [v for name, v in elements.attributes if name == "data-kpi"] == [value]
    assert [v for name, v in elements.attributes if name == "title"] == ([value] if value else [])


def test_numbers_read_with_thousands_separators_fractions_as_percent_and_gaps_as_a_dash() -> None:
    frame = pd.DataFrame(
        {"Page": ["/a", "/b"], "pageviews": [12345, 7], "rate": [0.4567, float("nan")], "p50": [1.5, 2.25]}
    )
    elements = parsed(markup.table(frame, name="t", percent=("rate",)))
    assert elements.data == [
        "Page",
        "pageviews",
        "rate",
        "p50",
        "/a",
        "12,345",
        "45.7%",
        "1.50",
        "/b",
        "7",
        "–",
        "2.25",
    ]


def test_numbers_align_right_and_text_left() -> None:
    body = markup.table(pd.DataFrame({"Page": ["/a"], "visitors": [3]}), name="t")
    assert "<td>/a</td>" in body and "<td class=tly-n>3</td>" in body


@pytest.mark.parametrize(
    ("change", "inverse", "shown"),
    [
        ("+12.5%", False, "tly-up"),
        ("-3.0%", False, "tly-down"),
        ("+12.5%", True, "tly-down"),
        ("-3.0%", True, "tly-up"),
    ],
)
def test_a_change_is_green_when_it_is_good_and_red_when_not(change: str, inverse: bool, shown: str) -> None:
    body = markup.cards([Card("Bounce rate", "40%", change, inverse=inverse)], per_row=3)
    assert shown in body and change.lstrip("+-") in body and ("↑" in body) == change.startswith("+")


def test_a_card_without_a_change_shows_none() -> None:
    assert "tly-delta" not in markup.cards([Card("Visits", "0")], per_row=3)


def test_bar_segments_are_clamped_to_their_share_of_the_width() -> None:
    body = markup.bars([("LCP", [Segment("Good", 120.0, "#0cce6b"), Segment("Poor", -5.0, "#ff4e42")])], [])
    assert "width:100.00%" in body and "width:0.00%" in body


def test_an_empty_frame_is_a_table_with_its_header_only() -> None:
    elements = parsed(markup.table(pd.DataFrame({"Page": [], "visitors": []}), name="t"))
    assert elements.data == ["Page", "visitors"]
