"""The running dashboard in Chromium: private by default, exact where exact, inert to hostile text.

Generated traffic plus hostile beacons go through the running stack (ingest → Kafka → archiver and
streaming views); the page's figures are compared with raw.pageviews read by delta-rs.
"""

from __future__ import annotations

import csv
import io
import json
import re
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from playwright.sync_api import expect

from tests.e2e.conftest import ARTIFACTS, RunningStack

FIREFOX = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"
SITE = "demo.tally.local"
GAP_MS = 30 * 60_000  # spark.session_gap
# Each probe sets a global if it ever runs; the page must show it as text instead.
PROBES = {
    "u": f"https://{SITE}/<img src=x onerror=window.__xss=1>",
    "r": "javascript:window.__xss=2",
    "ti": "<script>window.__xss=3</script>",
    "n": "<img src=y onerror=window.__xss=4>",
}


def raw_table(stack: RunningStack) -> DeltaTable:
    """raw.pageviews, read by delta-rs (not Spark)."""
    return DeltaTable(str(stack.home / "warehouse" / "raw" / "pageviews"))


def raw_figures(stack: RunningStack) -> tuple[int, int]:
    """Non-bot page views and distinct visitor ids in raw.pageviews."""
    raw = raw_table(stack).to_pyarrow_table(columns=["type", "is_bot", "visitor_id"])
    human = raw.filter(pc.invert(raw["is_bot"]))
    views = int(pc.sum(pc.equal(human["type"], "pageview")).as_py() or 0)
    return views, len(pc.unique(human["visitor_id"]))


def views_total(stack: RunningStack) -> int:
    """Page views in agg.traffic_1d's site-total rows (what the KPI sums), read by delta-rs."""
    try:
        days = DeltaTable(str(stack.home / "warehouse" / "agg" / "traffic_1d")).to_pyarrow_table(
            columns=["dimension", "pageviews"]
        )
    except TableNotFoundError:
        return 0
    return int(pc.sum(days.filter(pc.equal(days["dimension"], "all"))["pageviews"]).as_py() or 0)


def raw_visits(stack: RunningStack) -> int:
    """The site's visits in raw.pageviews: one visitor's non-bot events less than the 30-minute gap
    apart, with a page view (the views' rule), sessionised with pandas."""
    raw = raw_table(stack).to_pandas(columns=["site_id", "event_id", "type", "is_bot", "visitor_id", "event_time"])
    raw = raw[(raw["site_id"] == SITE) & ~raw["is_bot"].fillna(False)].drop_duplicates("event_id")
    raw = raw.sort_values(["visitor_id", "event_time", "event_id"])
    starts = raw.groupby("visitor_id")["event_time"].diff().fillna(GAP_MS) >= GAP_MS
    visit = starts.groupby(raw["visitor_id"]).cumsum()
    with_views = raw.assign(visit=visit, view=raw["type"] == "pageview").groupby(["visitor_id", "visit"])["view"].any()
    return int(with_views.sum())


def in_raw(stack: RunningStack, event_ids: list[str]) -> bool:
    """Whether raw.pageviews holds every one of these events."""
    try:
        raw = raw_table(stack).to_pyarrow_table(columns=["event_id"])
    except TableNotFoundError:
        return False
    return set(event_ids) <= set(raw["event_id"].to_pylist())


def send_hostile_beacons(stack: RunningStack) -> list[str]:
    """Send the probes (the last events of the test); return their event ids."""
    now = int(time.time() * 1000)
    ids = [str(uuid.uuid4()) for _ in range(2)]
    for event_id, (kind, name) in zip(ids, (("pageview", None), ("event", PROBES["n"])), strict=True):
        beacon: dict[str, object] = {"id": event_id, "k": kind, "s": SITE, "u": PROBES["u"], "r": PROBES["r"]}
        beacon |= {"ti": PROBES["ti"], "te": now, "ts": now} | ({"n": name} if name else {})
        headers = {"Content-Type": "text/plain", "User-Agent": FIREFOX, "X-Forwarded-For": "81.2.69.142"}
        response = httpx.post(f"{stack.ingest_url}/api/event", content=json.dumps(beacon), headers=headers)
        assert response.status_code == 202, response.text
    return ids


FIGURES = (  # any figure drawn: dashboard/markup.py's cards, tables and charts, or Streamlit's own
    "[data-kpi], [data-table], [data-chart], .tly-bars, [data-testid='stMetric'], [data-testid='stDataFrame']"
)


def metric(page: Any, label: str) -> str | None:
    """The value of the headline figure with this label (dashboard/markup.py's card), as shown."""
    box = page.locator(f"[data-kpi='{label}'] [data-value]")
    if box.count() == 0:
        return None
    return str(box.first.inner_text())


def log_in(page: Any, stack: RunningStack) -> None:
    password = (stack.home / "dashboard" / "admin-password").read_text().strip()
    page.get_by_role("textbox", name="User").fill("admin")
    page.get_by_role("textbox", name="Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    try:
        page.wait_for_selector("[data-kpi]", timeout=60000)
    except Exception:
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "dashboard-login-failed.png"), full_page=True)
        raise


def test_the_dashboard_is_private_exact_and_inert_to_hostile_text(stack: RunningStack, browser: Any) -> None:
    traffic = stack.tally("traffic", "--rate", "40", "--duration", "8", "--target", stack.ingest_url)
    assert traffic.returncode == 0, traffic.stdout + traffic.stderr
    assert "0 failed" in traffic.stdout
    hostile = send_hostile_beacons(stack)

    page = browser.new_page(viewport={"width": 1400, "height": 1600})
    dialogs: list[str] = []

    def dismiss(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", dismiss)
    page.goto(stack.dashboard_url)
    page.wait_for_selector("text=Analytics data is private", timeout=60000)
    assert page.locator(FIGURES).count() == 0, "an anonymous browser must see no figures"

    # Wait until raw holds the last events sent and the streaming views hold every page view in
    # raw, then log in (the session cookie keeps the login across reloads: test_dashboard_sessions.py).
    deadline = time.monotonic() + 300
    expected = (0, 0)
    while time.monotonic() < deadline:
        if in_raw(stack, hostile):
            expected = raw_figures(stack)
            if views_total(stack) == expected[0]:
                break
        time.sleep(2)
    else:
        raise AssertionError(f"the views never caught up with raw: raw has {expected}, views {views_total(stack)}")
    log_in(page, stack)
    # The realtime metric renders first and the KPIs after the range's totals are read: read the
    # figures only once the page's last line shows that the script run is over.
    page.wait_for_selector("text=Figures as of", timeout=60000)
    views_text = metric(page, "Page views")
    shown = int(re.sub(r"\D", "", views_text)) if views_text else None
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
    assert expected and shown == expected[0], f"dashboard shows {shown} page views, raw has {expected}"

    # Visits count from their first event: the traffic just sent is in visits the views have not
    # written yet (they close 30 minutes after their last event), shown at once, marked provisional.
    visits_text = metric(page, "Visits")
    assert visits_text and int(re.sub(r"\D", "", visits_text)) == raw_visits(stack), (visits_text, raw_visits(stack))
    assert metric(page, "Bounce rate (provisional)") is not None, "an open visit's bounce must be marked provisional"
    assert metric(page, "Visit duration (provisional)") is not None
    help_text = page.locator("[data-kpi='Bounce rate (provisional)']").first.get_attribute("title") or ""
    assert "still open" in help_text, help_text

    visitors = metric(page, "Unique visitors (≈)") or ""
    match = re.fullmatch(r"≈ ([\d,]+) ± ([\d.<]+)%", visitors)
    assert match, f"unique visitors must be labelled approximate with a bound, got {visitors!r}"
    estimate, bound = int(match[1].replace(",", "")), float(match[2].lstrip("<"))
    assert abs(estimate - expected[1]) <= max(1, estimate * bound / 100), (estimate, bound, expected[1])
    # What "visitors" means over the 7 days on screen, in plain words (the site's salt period is a day).
    page.get_by_text("Visitors here are daily visitor ids", exact=False).first.wait_for(timeout=10000)

    assert page.evaluate("window.__xss") is None and not dialogs, "a hostile string ran as code"
    assert page.locator("img[src='x'], img[src='y']").count() == 0, "a hostile string became an element"

    # A table's CSV is made when its button is clicked (a deferred download, not on every page run).
    with page.expect_download(timeout=60000) as download:
        page.get_by_role("button", name="Top pages (CSV)", exact=True).click()
    rows = list(csv.reader(io.StringIO(Path(download.value.path()).read_text())))
    assert download.value.suggested_filename == "top_pages.csv" and rows[0][0] == "Page", rows[:2]
    views = [int(r[rows[0].index("pageviews")]) for r in rows[1:]]
    assert views and sum(views) <= expected[0] and views == sorted(views, reverse=True), rows

    # Only the open tab's tables are drawn; picking another tab reruns that panel alone and draws its own.
    assert page.get_by_text("Browsers", exact=True).count() == 0, "a closed tab's table is drawn"
    page.get_by_role("tab", name="Devices").click()
    page.get_by_text("Browsers", exact=True).first.wait_for(timeout=30000)
    # The tab left empties once the panel's rerun is over (its elements are taken away at the end).
    expect(page.get_by_text("Top pages", exact=True)).to_have_count(0, timeout=30000)
    assert page.evaluate("window.__xss") is None and not dialogs

    # The page filter (in the Filters menu, drawn once open) lists the hostile path as plain text.
    page.locator("[data-testid='stSidebar']").get_by_role("button", name="Filters").click()
    page.locator("[data-testid='stPopoverBody']").get_by_label("Page").click()
    page.get_by_text("/<img src=x onerror=window.__xss=1>", exact=True).first.wait_for(timeout=30000)
    assert page.evaluate("window.__xss") is None and not dialogs
