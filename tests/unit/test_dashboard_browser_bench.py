"""bench.dashboard_browser reports what a person waits for: medians and spreads, never a single timing."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

import bench.dashboard
import bench.dashboard_browser
from bench.dashboard_browser import before_table, page_url, percentile, spread_figures


def test_the_page_is_opened_on_the_benchmark_site_and_a_preset_range() -> None:
    url = urlsplit(page_url("http://127.0.0.1:8000", "90d"))
    assert url.netloc == "127.0.0.1:8000"
    assert parse_qs(url.query) == {"site": [bench.dashboard.SITE], "range": ["90d"]}


def test_a_sample_is_reported_as_its_median_and_95th_percentile() -> None:
    figures = spread_figures("warm, 7 days", [400.0, 100.0, 300.0, 200.0, 1000.0], goal="≤ 1,000 ms")
    assert [(f.name, f.value) for f in figures] == [("warm, 7 days: p50", 300.0), ("warm, 7 days: p95", 1000.0)]
    assert figures[0].goal == "≤ 1,000 ms" and figures[0].note == "5 samples"


def test_a_single_sample_is_one_figure_and_no_sample_is_none() -> None:
    assert [f.name for f in spread_figures("first load, today", [2500.0])] == ["first load, today"]
    assert spread_figures("filter change", []) == []


def test_the_nearest_rank_percentile_is_a_value_of_the_sample() -> None:
    sample = [float(v) for v in range(1, 21)]
    assert percentile(sample, 0.95) == 19.0 and percentile(sample, 0.5) == 10.0


def test_the_figures_before_the_changes_are_shown_in_the_documents_table_format(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bench.dashboard_browser, "BEFORE", {"warm, 90 days: p50": (3512.4, 3400.0, 3650.0)})
    monkeypatch.setattr(bench.dashboard_browser, "BEFORE_COMMIT", "abc1234")
    table = before_table()
    assert "commit abc1234" in table
    assert "| warm, 90 days: p50 | 3,512 | 3,400 – 3,650 | ms | 3 |" in table
