"""The dashboard on a phone: at 390 px wide the KPIs, the chart and the tables fit the screen, so
the page never scrolls sideways (checked on the element positions; the screenshot is kept)."""

from __future__ import annotations

from typing import Any

from tests.e2e.conftest import ARTIFACTS, RunningStack
from tests.e2e.test_dashboard import log_in

PHONE = {"width": 390, "height": 844}
PARTS = {
    "KPI": "[data-kpi]",
    "chart": "[data-chart]",
    "table": ".tly-scroll",  # a table's box: a table wider than the screen scrolls inside it
}


def test_at_390_px_the_kpis_chart_and_tables_fit_without_sideways_scrolling(stack: RunningStack, browser: Any) -> None:
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True, device_scale_factor=2)
    try:
        page = context.new_page()
        page.goto(stack.dashboard_url)
        page.wait_for_selector("text=Analytics data is private", timeout=60000)
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"], "the login form fits"
        log_in(page, stack)
        page.wait_for_selector("text=Figures as of", timeout=60000)
        page.wait_for_selector(PARTS["chart"], timeout=30000)
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard-phone.png"), full_page=True)

        width = page.evaluate("Math.max(document.documentElement.scrollWidth, document.body.scrollWidth)")
        assert width <= PHONE["width"], f"the page is {width} px wide on a {PHONE['width']} px screen"
        for name, selector in PARTS.items():
            boxes = [page.locator(selector).nth(i).bounding_box() for i in range(page.locator(selector).count())]
            assert boxes, f"no {name} on the page"
            outside = [box for box in boxes if box and (box["x"] < 0 or box["x"] + box["width"] > PHONE["width"] + 0.5)]
            assert not outside, f"{len(outside)} {name}(s) reach outside the screen: {outside[:3]}"
        values = page.locator("[data-kpi] [data-value]")
        for i in range(values.count()):  # a KPI's figure is not cut off inside its box
            assert values.nth(i).evaluate("e => e.scrollWidth <= e.clientWidth + 1"), values.nth(i).inner_text()
    finally:
        context.close()
