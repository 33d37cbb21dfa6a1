"""Generated traffic through the running stack shows up, exactly, on the dashboard in Chromium."""

from __future__ import annotations

import re
import time
from typing import Any

import pyarrow.compute as pc
from deltalake import DeltaTable

from tests.e2e.conftest import ARTIFACTS, RunningStack


def exact_pageviews_in_raw(stack: RunningStack) -> int:
    """Non-bot page views in raw.pageviews, counted by delta-rs (independent of Spark)."""
    raw = DeltaTable(str(stack.home / "warehouse" / "raw" / "pageviews")).to_pyarrow_table(columns=["type", "is_bot"])
    return int(pc.sum(pc.and_(pc.equal(raw["type"], "pageview"), pc.invert(raw["is_bot"]))).as_py() or 0)


def shown_pageviews(page: Any) -> int | None:
    metric = page.get_by_test_id("stMetricValue")
    if metric.count() == 0:
        return None
    return int(re.sub(r"\D", "", metric.first.inner_text()))


def test_the_dashboard_shows_the_exact_page_views_of_generated_traffic(stack: RunningStack, browser: Any) -> None:
    traffic = stack.tally("traffic", "--rate", "40", "--duration", "8", "--target", stack.ingest_url)
    assert traffic.returncode == 0, traffic.stdout + traffic.stderr
    assert "0 failed" in traffic.stdout

    page = browser.new_page(viewport={"width": 1280, "height": 1400})
    deadline = time.monotonic() + 120
    expected = shown = None
    while time.monotonic() < deadline:
        page.goto(stack.dashboard_url)
        page.wait_for_selector("h1:has-text('Tally')", timeout=30000)
        page.wait_for_timeout(2500)
        expected, shown = exact_pageviews_in_raw(stack), shown_pageviews(page)
        if expected and shown == expected:
            break
        time.sleep(3)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
    assert expected and shown == expected, f"dashboard shows {shown}, raw has {expected} page views"
    assert page.get_by_text("Top pages").count() == 1
