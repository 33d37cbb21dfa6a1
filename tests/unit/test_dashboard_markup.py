"""The dashboard's HTML panels (dashboard/markup.py): hostile text stays text, figures read as people read them."""

from __future__ import annotations

import datetime as dt
import html
import re
from html.parser import HTMLParser
from urllib.parse import unquote

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dashboard import markup
from dashboard.markup import Card, Line, Segment
from dashboard.series_chart import note_positions, time_labels
from tally.annotations import Annotation

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
    elements = parsed(markup.cards([Card(value, value, help=value, band=value, colour="#0cce6b")], per_row=3))
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


def test_a_count_column_with_a_gap_still_reads_as_whole_numbers() -> None:
    frame = pd.DataFrame({"Page": ["/a", "/b"], "Scroll depth %": [60, None]})  # the gap makes the column float
    assert parsed(markup.table(frame, name="t")).data[-3:] == ["60", "/b", "–"]


@pytest.mark.parametrize("bad", ["red;background:url(//evil.example)", "#12345", "#0cce6b;x:y", "blue"])
def test_a_colour_that_is_not_rrggbb_is_refused_before_it_reaches_a_style(bad: str) -> None:
    with pytest.raises(AssertionError, match="rrggbb"):
        markup.cards([Card("LCP p75", "2 s", band="Good", colour=bad)], per_row=3)
    with pytest.raises(AssertionError, match="rrggbb"):
        markup.bars([("LCP", [Segment("Good", 50.0, bad)])], [])


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


@pytest.mark.parametrize(
    ("largest", "top", "step"),
    [(6812.0, 8000.0, 2000.0), (100.0, 100.0, 20.0), (7.0, 8.0, 2.0), (3.0, 3.0, 1.0), (0.0, 1.0, 1.0)],
)
def test_the_value_axis_ends_on_a_round_step_above_the_largest_value(largest: float, top: float, step: float) -> None:
    assert markup.nice_top(largest) == (top, step)


def chart(values: list[float | None], notes: list[tuple[float, str]] | None = None) -> str:
    labels = [f"day {i}" for i in range(len(values))]
    lines = [Line("Page views", "#1f77b4", values)]
    return markup.line_chart(labels, lines, ticks=[0], tick_labels=["day 0"], x_title="Time (UTC)", notes=notes or [])


def svg_of(body: str) -> str:
    src = next(v for name, v in parsed(body).attributes if name == "src")
    assert src and src.startswith("data:image/svg+xml,")
    return unquote(src.removeprefix("data:image/svg+xml,"))


def test_a_line_is_one_polyline_per_unbroken_run_of_values_in_a_stretched_svg_image() -> None:
    svg = svg_of(chart([10.0, 20.0, None, 40.0, 30.0]))
    assert 'preserveAspectRatio="none"' in svg and 'stroke="#1f77b4"' in svg
    runs = re.findall(r'<polyline points="([^"]+)"', svg)
    assert runs == ["0.0,750.0 250.0,500.0", "750.0,0.0 1000.0,250.0"]  # the axis tops at 40


def test_every_bucket_tells_its_name_and_each_lines_value_on_hover() -> None:
    titles = [v for name, v in parsed(chart([1234.4, None])).attributes if name == "title"]
    assert titles == ["day 0\nPage views: 1,234", "day 1\nPage views: –"]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_text_in_a_note_or_label_is_text_and_never_reaches_the_svg(hostile: str) -> None:
    body = markup.line_chart(
        [hostile, hostile],
        [Line(hostile, "#1f77b4", [1.0, 2.0])],
        ticks=[0],
        tick_labels=[hostile],
        x_title=hostile,
        notes=[(0.5, hostile), (1.5, "outside the range")],
    )
    elements = parsed(body)
    assert set(elements.tags) <= {"div", "span", "i", "img"}
    assert not [name for name, _ in elements.attributes if name.startswith("on") or name == "href"]
    assert hostile in elements.data and "outside the range" not in body
    assert hostile not in svg_of(body) and html.escape(hostile) not in svg_of(body)


def test_days_are_labelled_by_date_and_hours_by_time_with_the_date_at_midnight() -> None:
    days = pd.Series(pd.date_range("2026-09-01", periods=30, freq="D"))
    names, ticks, labels = time_labels(days, "day")
    assert names[0] == "Tue Sep 01, 2026" and ticks == list(range(0, 30, 5)) and labels[:2] == ["Sep 01", "Sep 06"]
    hours = pd.Series(pd.date_range("2026-09-01 18:00", periods=12, freq="h"))
    names, ticks, labels = time_labels(hours, "hour")
    assert names[0] == "Tue Sep 01 18:00" and labels == ["18:00", "20:00", "22:00", "Sep 02", "02:00", "04:00"]


def test_a_note_sits_at_its_days_start_along_the_axis() -> None:
    days = pd.Series(pd.date_range("2026-09-01", periods=11, freq="D"))
    notes = [Annotation("n1", "s", dt.date(2026, 9, 6), "launch", "2026-09-06T10:00:00Z", "ana")]
    assert note_positions(days, notes) == [(0.5, "2026-09-06: launch")]
    assert note_positions(days[:3], notes) == [], "a day the axis does not reach"


def test_on_an_hourly_axis_across_a_clock_change_a_note_sits_on_its_days_first_hour() -> None:
    # Europe/Berlin's wall clock on 2026-10-25: 02:00 comes twice, so the day has 25 hourly buckets
    utc = pd.date_range("2026-10-24 22:00", periods=49, freq="h", tz="UTC")
    local = pd.Series(utc.tz_convert("Europe/Berlin").tz_localize(None))
    notes = [Annotation("n1", "s", dt.date(2026, 10, 26), "after the change", "2026-10-26T10:00:00Z", "ana")]
    ((position, _),) = note_positions(local, notes)
    first = next(i for i, t in enumerate(local) if t >= pd.Timestamp("2026-10-26"))
    assert first == 25 and position == first / 48
