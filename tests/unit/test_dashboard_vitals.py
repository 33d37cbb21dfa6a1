"""The Core Web Vitals panel and the top pages' scroll depth: the pure table builders, and the whole
page with Streamlit's AppTest over an agg.vitals_1h table written here with delta-rs."""

from __future__ import annotations

import datetime as dt
from html import escape
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from dashboard.vitals_panel import VITALS_TAB_KEY, VitalsShown, breakdown, caption, code_span, p75_text, shares_frame
from query.vitals import BandCounts, VitalFigures
from tally.settings import Settings
from tally.sketches import digest_from_values, sketch_from_ids
from tally.tables import TRAFFIC_1D, VITALS_1H
from tally.vitals import BANDS, VITALS, VITALS_BY_NAME
from tests.unit import markup_reader
from tests.unit.dashboard_page import logged_in

pytestmark = pytest.mark.usefixtures("dashboard_cookies")

SITE = "demo.tally.local"


def figures(value: str, measured: int = 10, depth: tuple[int, int] = (0, 0)) -> VitalFigures:
    return VitalFigures(
        value,
        measured,
        {v.name: v.good_max * 1.2 for v in VITALS},
        {v.name: BandCounts(6, 3, 1) for v in VITALS},
        *depth,
    )


def test_the_breakdown_has_a_row_per_page_with_each_vitals_p75_and_band_shares() -> None:
    table = breakdown([figures("/b", 4), figures("/a", 9, (150, 2))], "Page")
    assert table["Page"].tolist() == ["/a", "/b"], "most measured first"
    assert table.loc[0, "LCP p75"] == "3,000 ms" and table.loc[0, "CLS p75"] == "0.12"
    assert table.loc[0, "LCP good / NI / poor"] == "60 / 30 / 10 %"
    assert table["Scroll depth"].tolist() == ["75 %", "–"]


def test_the_band_bar_lists_each_vitals_three_shares_adding_to_100() -> None:
    bars = shares_frame(figures(""))
    assert len(bars) == 3 * len(VITALS)
    assert bars.groupby("vital")["share"].sum().tolist() == [100.0] * len(VITALS)


def test_p75_is_shown_in_milliseconds_or_unitless_for_cls_and_a_dash_when_unmeasured() -> None:
    assert p75_text(VITALS_BY_NAME["inp"], 212.4) == "212 ms"
    assert p75_text(VITALS_BY_NAME["cls"], 0.049) == "0.05"
    assert p75_text(VITALS_BY_NAME["lcp"], None) == "–"


def test_the_caption_says_the_p75_is_an_approximate_t_digest_with_its_bound_unless_exact() -> None:
    assert "p75 approximate (t-digest, ±0.5% in rank" in caption(False, 1200)
    assert "Exact, from raw events" in caption(True, 3)


def test_scroll_depths_are_whole_percents_of_the_pages_that_sent_one() -> None:
    shown = VitalsShown(False, figures(""), [figures("/a", depth=(101, 2)), figures("/b")], [])
    assert shown.scroll_depths() == {"/a": 50}


def vitals_row(hour: dt.datetime, dimension: str, value: str, lcps: list[int], depths: list[int]) -> dict[str, Any]:
    """One agg.vitals_1h row: LCP measured, CLS good everywhere, the others unmeasured."""
    row: dict[str, Any] = {
        "site_id": SITE,
        "window_start": hour,
        "window_end": hour + dt.timedelta(hours=1),
        "dimension": dimension,
        "value": value,
        "measured": len(lcps),
        "scroll_depth_sum": sum(depths),
        "scroll_depth_count": len(depths),
        "event_date": hour.date(),
    }
    for v in VITALS:
        values = lcps if v.name == "lcp" else [0.01] * len(lcps) if v.name == "cls" else []
        row[v.digest_column] = digest_from_values(values) if values else None
        for band in BANDS:
            row[v.band_column(band)] = sum(1 for x in values if v.band(x) == band)
    return row


def test_the_page_shows_each_vitals_p75_in_its_band_and_the_pages_scroll_depth(settings: Settings) -> None:
    hour = dt.datetime.combine(dt.datetime.now(dt.UTC).date(), dt.time(), dt.UTC)
    lcps = [1000, 2000, 3000, 3500, 5000]  # p75 3,500 ms: needs improvement
    rows = [
        vitals_row(hour, "all", "", lcps, [40, 80]),
        vitals_row(hour, "page", "/pricing", lcps, [40, 80]),
        vitals_row(hour, "device", "mobile", lcps, [40, 80]),
    ]
    write_deltalake(settings.table_uri(VITALS_1H.table), pa.Table.from_pylist(rows), partition_by=["event_date"])
    traffic = {
        "site_id": SITE,
        "window_start": hour,
        "dimension": "page",
        "value": "/pricing",
        "pageviews": 4,
        "events": 0,
        "visitors_sketch": sketch_from_ids(["a", "b"]),
        "engagement_ms_digest": b"",
        "load_ms_digest": b"",
        "event_date": hour.date(),
    }
    write_deltalake(settings.table_uri(TRAFFIC_1D.table), pa.Table.from_pylist([traffic]), partition_by=["event_date"])
    app = logged_in(settings).run()
    assert not app.exception
    assert "Core Web Vitals" in [h.value for h in app.subheader]
    shown = markup_reader.cards(app)
    assert shown["LCP p75"] == "3,500 ms" and shown["CLS p75"] == "0.01" and shown["INP p75"] == "–"
    bands = markup_reader.bands(app)
    assert bands["LCP p75"] == "Needs improvement" and bands["CLS p75"] == "Good" and "INP p75" not in bands
    assert "p75 approximate (t-digest" in markup_reader.text(app)
    tables = markup_reader.tables(app)
    by_page = tables["vitals_by_page"]
    assert by_page["Page"].tolist() == ["/pricing"] and by_page["LCP good / NI / poor"].tolist() == ["40 / 40 / 20 %"]
    top_pages = tables["top_pages"]
    assert top_pages["Page"].tolist() == ["/pricing"] and top_pages["Scroll depth %"].tolist() == ["60"]
    assert "vitals_by_device" not in tables, "only the open tab's table is drawn"

    app.session_state[VITALS_TAB_KEY] = "By device"  # what picking the tab does
    app.run()
    assert not app.exception
    tables = markup_reader.tables(app)
    assert tables["vitals_by_device"]["Device"].tolist() == ["mobile"]
    assert "vitals_by_page" not in tables


def test_with_nothing_measured_the_panel_says_to_add_the_vitals_extension_with_its_tag(settings: Settings) -> None:
    app = logged_in(settings).run()
    assert not app.exception
    assert any("No Core Web Vitals were measured" in i.value and "t.vitals.js" in i.value for i in app.info)
    # Inline code: a code block would load the browser's syntax highlighter for one line
    assert any(m.value.startswith("` <script defer") and f'data-site="{SITE}"' in m.value for m in app.markdown)
    assert not app.code
    assert not [label for label in markup_reader.cards(app) if label.endswith("p75")]


def test_the_tag_is_shown_as_a_code_span_whatever_backticks_it_holds() -> None:
    from markdown_it import MarkdownIt  # a CommonMark parser, as the page's Markdown is

    for text in ('<script data-site="a">', "a`b", "``x``", "`"):
        html = MarkdownIt().renderInline(code_span(text))
        assert html == f"<code>{escape(text)}</code>", (text, html)
