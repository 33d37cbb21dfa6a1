"""The Core Web Vitals extension (/t.vitals.js) in a real headless Chromium, against the running
stack: a page whose LCP (a large image the page server delays) and CLS (a block inserted above the
content) the page also measures itself; what the extension sends when the page is hidden, what it
must not send, what a real Kafka consumer then finds, and what the Stats API shows."""

from __future__ import annotations

import functools
import http.server
import json
import os
import struct
import threading
import time
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from ops.stack import free_ports
from tally.settings import load_settings
from tally.vitals import SCROLL_DEPTH_COLUMN, VITALS, VITALS_TYPE
from tests.e2e.conftest import RunningStack
from tests.e2e.test_tracker import wait_in_page
from tests.integration.conftest import wait_for
from tests.integration.kafka_reader import read_topic

IMAGE_DELAY_S = 0.6  # the page server holds every .png this long: the image paints late, as the LCP
IMAGE_W, IMAGE_H = 640, 400
# The page measures its own LCP (the last largest-contentful-paint entry) and CLS (layout shifts
# without recent input, summed: its one shift makes one session window). Nobody interacts with it,
# so it has no INP, and the beacon must leave INP out.
PAGE = """<!doctype html><html><head><title>Vitals e2e</title>
<script>
window.measured = {{lcp: 0, lcpElement: "", cls: 0, shifts: 0}};
new PerformanceObserver((list) => {{
  for (const e of list.getEntries()) {{ measured.lcp = e.startTime; measured.lcpElement = e.element?.id || ""; }}
}}).observe({{type: "largest-contentful-paint", buffered: true}});
new PerformanceObserver((list) => {{
  for (const e of list.getEntries()) if (!e.hadRecentInput) {{ measured.cls += e.value; measured.shifts++; }}
}}).observe({{type: "layout-shift", buffered: true}});
</script>
{scripts}
</head><body style="margin: 0; font: 16px sans-serif">
<h1>Vitals</h1>
<p id="content">The paragraph the inserted block pushes down.</p>
<img id="hero" src="hero.png" width="{w}" height="{h}" alt="">
<div style="height: 3000px">A long page, so that it scrolls.</div>
<script>
setTimeout(() => {{
  const block = document.createElement("div");
  block.style.height = "200px";
  block.textContent = "inserted above the content";
  document.body.insertBefore(block, document.getElementById("content"));
  window.shifted = true;
}}, 300);
</script>
</body></html>"""
SCRIPT = '<script defer data-site="{site}" {attrs} src="{ingest}/{path}"></script>'
COUNTED = "data-local data-automation"  # count this headless browser on 127.0.0.1
AFTER = "after.html"  # the page a test page is left for


class SlowImages(http.server.SimpleHTTPRequestHandler):
    """Serves the test pages; holds images back so that the image is the page's late LCP."""

    def do_GET(self) -> None:
        if self.path.split("?")[0].endswith(".png"):
            time.sleep(IMAGE_DELAY_S)
        super().do_GET()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests assert on what the browser sends, not on this server's log."""


def noise_png(width: int, height: int) -> bytes:
    """A grey-noise PNG: random pixels, so Chromium does not drop it as a low-content LCP candidate."""
    rows = b"".join(b"\x00" + os.urandom(width) for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit greyscale
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("vitals-pages")
    (port,) = free_ports(1)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), functools.partial(SlowImages, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{port}", root
    server.shutdown()


def page_with(root: Path, stack: RunningStack, attrs: str, *, core: bool = True) -> str:
    """A fresh folder holding the test page (the extension, and the core snippet unless ``core`` is
    False), its image and a page to leave to (with the counted core snippet: its page view is what
    :func:`leave` waits for); returns the folder's name, a marker in every URL."""
    marker = uuid.uuid4().hex
    folder = root / marker
    folder.mkdir()
    site = load_settings().sites[0].site_id
    paths = ["t.js", "t.vitals.js"] if core else ["t.vitals.js"]
    scripts = "\n".join(SCRIPT.format(site=site, attrs=attrs, ingest=stack.ingest_url, path=p) for p in paths)
    (folder / "index.html").write_text(PAGE.format(scripts=scripts, w=IMAGE_W, h=IMAGE_H))
    (folder / "hero.png").write_bytes(noise_png(IMAGE_W, IMAGE_H))
    counted = SCRIPT.format(site=site, attrs=COUNTED, ingest=stack.ingest_url, path="t.js")
    (folder / AFTER).write_text(f"<!doctype html><title>after</title>{counted}<p>another page")
    return marker


def desktop_user_agent(browser: Any) -> str:
    """Chromium's own user agent without "Headless": headless Chromium is flagged as a bot, and bots
    are left out of the views the API reads."""
    return (
        f"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{browser.version} Safari/537.36"
    )


@dataclass
class OpenPage:
    """A page under test, the JSON bodies it posted to /api/event, and its console lines."""

    page: Any
    sent: list[dict[str, Any]]
    console: list[str]

    def vitals(self) -> list[dict[str, Any]]:
        return [b for b in self.sent if b.get("k") == VITALS_TYPE]


def is_beacon(request: Any) -> bool:
    return bool(request.url.endswith("/api/event"))


def beacon_url(request: Any) -> str:
    return str(json.loads(request.post_data)["u"])


def open_page(browser: Any, url: str, init_script: str = "") -> OpenPage:
    page = browser.new_page(user_agent=desktop_user_agent(browser))
    opened = OpenPage(page, [], [])
    # What the test page sends; the page it is left for (AFTER) sends a page view of its own.
    page.on(
        "request",
        lambda r: (
            opened.sent.append(json.loads(r.post_data))
            if is_beacon(r) and not beacon_url(r).endswith(f"/{AFTER}")
            else None
        ),
    )
    page.on("console", lambda m: opened.console.append(m.text))
    if init_script:
        page.add_init_script(init_script)
    page.goto(url)
    return opened


def settle(opened: OpenPage) -> dict[str, Any]:
    """Wait until the page has its LCP (the delayed image) and its layout shift; the extension's
    observers get the same entries in the same task. Returns the page's own measures."""
    page = opened.page

    def measures() -> dict[str, Any]:
        value: dict[str, Any] = page.evaluate("({...window.measured, shifted: !!window.shifted})")
        return value

    wait_in_page(page, lambda: measures()["lcpElement"] == "hero" and measures()["shifted"], 15, "the image's LCP")
    page.wait_for_timeout(300)
    return measures()


def scroll_to_bottom_and_back(page: Any) -> None:
    """Deepest point: the bottom. Then back to the top, so only the deepest position yet says 100."""
    page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
    page.wait_for_timeout(400)  # past the 100 ms scroll throttle
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_timeout(400)


def set_visibility(page: Any, state: str) -> None:
    """Headless Chromium's pages are always visible (switching or minimising changes nothing), so
    the page is told it is hidden or shown as a switched tab is: visibilityState, hidden, and a
    visibilitychange event, which web-vitals' capturing listener on window sees first."""
    page.evaluate(
        """(state) => {
            for (const [name, value] of [['visibilityState', state], ['hidden', state == 'hidden']])
                Object.defineProperty(document, name, {value, configurable: true});
            document.dispatchEvent(new Event('visibilitychange', {bubbles: true}));
        }""",
        state,
    )


def wait_for_vitals(opened: OpenPage, count: int) -> None:
    try:
        wait_in_page(opened.page, lambda: len(opened.vitals()) >= count, 15, f"{count} vitals beacons")
    except AssertionError as e:
        raise AssertionError(f"{e}; the page sent {opened.sent}, its console said {opened.console}") from e


def leave(opened: OpenPage, base: str, marker: str) -> None:
    """Navigate to another page: pagehide, then visibilitychange to hidden. Playwright does not
    report requests sent while a page unloads (ingest receives them), so what is sent then is read
    from Kafka (:func:`sent_to_ingest`). The other page's own page view is sent after the unload,
    by the same browser to the same ingest: once ingest has answered it (202, so it is in Kafka),
    the page is closed, and :func:`received_once_settled` waits for that page view in Kafka."""
    after = f"{base}/{marker}/{AFTER}"
    with opened.page.expect_response(lambda r: is_beacon(r.request) and beacon_url(r.request) == after) as answer:
        opened.page.goto(after)
    assert answer.value.status == 202, answer.value.text()
    opened.page.close()


@dataclass(frozen=True)
class Received:
    """What ingest made of a page's beacons: the accepted events, and the refusals naming the page."""

    events: list[dict[str, Any]]
    refusals: list[str]

    def vitals(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == VITALS_TYPE]


def sent_to_ingest(stack: RunningStack, marker: str) -> tuple[Received, list[dict[str, Any]]]:
    """Every event in ``pageviews`` whose URL holds ``marker``, and every dead letter on
    ``pageviews.rejected`` whose record mentions it: all that the page's beacons became; and apart,
    the events of the page it was left for (AFTER)."""
    settings = load_settings()
    servers = f"127.0.0.1:{stack.env['TALLY_KAFKA__PORT']}"
    events = [json.loads(v) for _, v in read_topic(servers, settings.kafka.pageviews_topic)]
    refused = [v.decode() for _, v in read_topic(servers, settings.kafka.rejected_topic)]
    ours = [e for e in events if marker in e["url"]]
    after = [e for e in ours if e["url"].endswith(f"/{AFTER}")]
    page = [e for e in ours if not e["url"].endswith(f"/{AFTER}")]
    return Received(page, [r for r in refused if marker in r]), after


def received_once_settled(stack: RunningStack, marker: str, vitals: int) -> Received:
    """Wait until the page view of the page it was left for (see :func:`leave`) and ``vitals``
    vitals events of the page are in Kafka. Whatever the page sent while it lived and as it
    unloaded (one too many, or a refusal) was sent before that page view, so it is there too."""
    read: list[Received] = []

    def settled() -> bool:
        received, after = sent_to_ingest(stack, marker)
        read[:] = [received]
        return any(e["type"] == "pageview" for e in after) and len(received.vitals()) >= vitals

    what = f"{vitals} vitals events and the page view of {AFTER} in Kafka"
    wait_for(settled, 30, what)
    return read[0]


def assert_matches_the_page(beacon: dict[str, Any], measured: dict[str, Any]) -> None:
    """The beacon's LCP and CLS are the page's own measures, rounded as the wire format says; the
    page had no interaction, so no INP is sent."""
    assert measured["lcp"] >= IMAGE_DELAY_S * 1000 and measured["shifts"] >= 1 and measured["cls"] > 0, measured
    assert isinstance(beacon["lcp"], int) and abs(beacon["lcp"] - measured["lcp"]) <= 1, (beacon, measured)
    assert abs(beacon["cls"] - measured["cls"]) <= 1e-4, (beacon, measured)
    assert beacon["cls"] == round(beacon["cls"], 4)
    assert "inp" not in beacon, beacon
    for key in ("fcp", "ttfb"):
        assert isinstance(beacon[key], int), (key, beacon)
    assert 0 <= beacon["ttfb"] <= beacon["fcp"] <= beacon["lcp"], beacon


def assert_event_is_the_beacon(event: dict[str, Any], beacon: dict[str, Any]) -> None:
    """The event in Kafka carries the beacon's id and every one of its measures under its column name."""
    assert event["event_id"] == beacon["id"] and event["type"] == VITALS_TYPE, event
    for vital in VITALS:
        assert event[vital.column] == beacon.get(vital.name), (vital.column, event, beacon)
    assert event[SCROLL_DEPTH_COLUMN] == beacon["sd"], event


@dataclass(frozen=True)
class MeasuredVisit:
    """One visit to the test page with a desktop user agent: the page's measures, its vitals beacon,
    every body it posted, and what ingest made of them."""

    marker: str
    measured: dict[str, Any]
    beacon: dict[str, Any]
    sent: list[dict[str, Any]]
    received: Received


@pytest.fixture(scope="module")
def measured_visit(stack: RunningStack, browser: Any, pages: tuple[str, Path]) -> MeasuredVisit:
    """Open the test page with both scripts, let it paint and shift, scroll to the bottom and
    back, hide it, then leave it."""
    base, root = pages
    marker = page_with(root, stack, COUNTED)
    opened = open_page(browser, f"{base}/{marker}/index.html")
    try:
        measured = settle(opened)
        scroll_to_bottom_and_back(opened.page)
        assert opened.vitals() == [], "nothing is sent while the page is visible"
        set_visibility(opened.page, "hidden")
        wait_for_vitals(opened, 1)
    finally:
        leave(opened, base, marker)
    vitals = opened.vitals()
    assert len(vitals) == 1, vitals
    return MeasuredVisit(marker, measured, vitals[0], list(opened.sent), received_once_settled(stack, marker, 1))


def test_a_hidden_page_sends_one_vitals_beacon_with_what_the_page_measured(measured_visit: MeasuredVisit) -> None:
    beacon, marker = measured_visit.beacon, measured_visit.marker
    assert beacon["u"].endswith(f"/{marker}/index.html") and beacon["s"] == load_settings().sites[0].site_id
    assert_matches_the_page(beacon, measured_visit.measured)
    assert beacon["sd"] == 100  # the bottom was reached, though the page was back at the top when hidden
    assert isinstance(beacon["te"], int) and beacon["te"] <= beacon["ts"]
    assert {"id", "r", "w", "l", "z"} <= beacon.keys()
    # The core snippet beside it works as before: one page view, and its engagement when hidden.
    kinds = sorted(b["k"] for b in measured_visit.sent)
    assert kinds == ["engagement", "pageview", "vitals"], kinds
    assert len({b["id"] for b in measured_visit.sent}) == 3


def test_the_vitals_event_reaches_kafka_once_with_its_measures(measured_visit: MeasuredVisit) -> None:
    """Leaving the hidden page (pagehide, a real visibilitychange) sends nothing more: ingest got
    exactly the three beacons the page sent while it lived, and refused none."""
    received = measured_visit.received
    assert received.refusals == []
    assert sorted(e["event_id"] for e in received.events) == sorted(b["id"] for b in measured_visit.sent)
    (event,) = received.vitals()
    assert_event_is_the_beacon(event, measured_visit.beacon)
    assert event["url"].endswith(f"/{measured_visit.marker}/index.html") and event[SCROLL_DEPTH_COLUMN] == 100
    assert event["is_bot"] is False  # the desktop user agent: the views count it


def test_a_page_left_while_visible_sends_its_vitals_on_pagehide(
    stack: RunningStack, browser: Any, pages: tuple[str, Path]
) -> None:
    """A navigation away from a visible page: the beacon goes at pagehide, with what the observers
    delivered until then; a page that unloads is not seen by Playwright, so Kafka says what came."""
    base, root = pages
    marker = page_with(root, stack, COUNTED, core=False)
    opened = open_page(browser, f"{base}/{marker}/index.html")
    try:
        measured = settle(opened)
        scroll_to_bottom_and_back(opened.page)
    finally:
        leave(opened, base, marker)
    assert opened.sent == []  # nothing while the page was visible
    received = received_once_settled(stack, marker, 1)
    assert received.refusals == [] and len(received.events) == 1, received
    (event,) = received.vitals()
    assert abs(event["lcp_ms"] - measured["lcp"]) <= 1 and abs(event["cls"] - measured["cls"]) <= 1e-4, event
    assert event["inp_ms"] is None and 0 <= event["ttfb_ms"] <= event["fcp_ms"] <= event["lcp_ms"], event
    assert event[SCROLL_DEPTH_COLUMN] == 100, event


def test_a_single_page_app_navigation_sends_the_previous_url_then_scroll_depth_only(
    stack: RunningStack, browser: Any, pages: tuple[str, Path]
) -> None:
    base, root = pages
    marker = page_with(root, stack, COUNTED, core=False)
    opened = open_page(browser, f"{base}/{marker}/index.html")
    try:
        measured = settle(opened)
        opened.page.evaluate("history.pushState({}, '', 'next')")
        wait_for_vitals(opened, 1)
        opened.page.evaluate("history.replaceState({}, '', 'next')")  # the same URL: not a page view
        opened.page.evaluate("history.replaceState({}, '', 'next#part')")  # without data-hash: neither
        scroll_to_bottom_and_back(opened.page)
        assert len(opened.vitals()) == 1, opened.vitals()
    finally:
        leave(opened, base, marker)
    (first,) = opened.vitals()
    assert first["u"].endswith(f"/{marker}/index.html")
    assert_matches_the_page(first, measured)
    # The first page view's scroll depth: the first viewport of a long page, well short of the bottom.
    assert 0 < first["sd"] < 100, first
    received = received_once_settled(stack, marker, 2)
    assert received.refusals == [] and len(received.vitals()) == 2, received
    event_of_first, second = sorted(received.vitals(), key=lambda e: e["event_id"] != first["id"])
    assert_event_is_the_beacon(event_of_first, first)
    # web-vitals measures the document's first page view only: the second carries scroll depth alone.
    assert second["url"].endswith(f"/{marker}/next") and second[SCROLL_DEPTH_COLUMN] == 100, second
    assert all(second[v.column] is None for v in VITALS), second


def test_a_page_hidden_shown_and_hidden_again_sends_one_beacon(
    stack: RunningStack, browser: Any, pages: tuple[str, Path]
) -> None:
    """A tab switched away from, back to and away again: web-vitals flushes first, the beacon goes
    at the first hide, and nothing is sent after it, not even on leaving."""
    base, root = pages
    marker = page_with(root, stack, COUNTED, core=False)
    opened = open_page(browser, f"{base}/{marker}/index.html")
    try:
        measured = settle(opened)
        set_visibility(opened.page, "hidden")
        wait_for_vitals(opened, 1)
        set_visibility(opened.page, "visible")
        opened.page.evaluate("window.scrollTo(0, document.documentElement.scrollHeight)")
        opened.page.wait_for_timeout(400)
        set_visibility(opened.page, "hidden")
        opened.page.wait_for_timeout(500)
    finally:
        leave(opened, base, marker)
    (beacon,) = opened.vitals()
    assert_matches_the_page(beacon, measured)
    assert beacon["sd"] < 100  # measured when first hidden, before the scroll
    received = received_once_settled(stack, marker, 1)
    assert received.refusals == [] and len(received.events) == 1, received
    assert_event_is_the_beacon(received.events[0], beacon)


@pytest.mark.parametrize(
    "attrs, init_script, reason",
    [
        ("data-local", "", "automation"),  # navigator.webdriver is true under automation
        ("data-automation", "", "localhost"),  # the page server is on 127.0.0.1
        (
            "data-local data-automation data-dnt",
            "Object.defineProperty(navigator, 'doNotTrack', {get: () => '1'})",
            "opt-out",
        ),
        (
            "data-local data-automation data-dnt",
            "Object.defineProperty(navigator, 'globalPrivacyControl', {get: () => true})",
            "opt-out",
        ),
    ],
)
def test_ignored_visits_send_no_vitals_and_say_why(
    stack: RunningStack, browser: Any, pages: tuple[str, Path], attrs: str, init_script: str, reason: str
) -> None:
    base, root = pages
    marker = page_with(root, stack, attrs, core=False)
    opened = open_page(browser, f"{base}/{marker}/index.html", init_script)
    try:
        wait_in_page(
            opened.page, lambda: f"tally vitals: {reason}" in opened.console, 15, f"the '{reason}' console message"
        )
        settle(opened)
        scroll_to_bottom_and_back(opened.page)
        opened.page.evaluate("history.pushState({}, '', 'next')")
        set_visibility(opened.page, "hidden")
        opened.page.wait_for_timeout(500)
    finally:
        leave(opened, base, marker)
    assert opened.sent == []
    assert received_once_settled(stack, marker, 0) == Received([], [])


def api_key(stack: RunningStack, site: str) -> str:
    """A Stats API key for ``site``, made as an operator makes one (`tally apikey create`)."""
    made = stack.tally("apikey", "create", "--name", f"e2e vitals {uuid.uuid4().hex[:8]}", "--sites", site)
    assert made.returncode == 0, made.stderr
    return made.stdout.strip().splitlines()[0]


def test_the_stats_api_shows_the_p75_lcp_and_cls_the_page_measured(
    stack: RunningStack, measured_visit: MeasuredVisit
) -> None:
    """One page view measured, so its page's p75 is that one value: a t-digest of one sample holds it
    exactly, and the API shows LCP in whole milliseconds and CLS to 3 decimals."""
    site = load_settings().sites[0].site_id
    headers = {"Authorization": f"Bearer {api_key(stack, site)}"}
    url = f"http://127.0.0.1:{stack.env['TALLY_API__PORT']}/api/v2/query"
    query = {"site_id": site, "metrics": ["lcp_p75", "cls_p75"], "date_range": "day", "dimensions": ["event:page"]}
    path = f"/{measured_visit.marker}/index.html"

    def page_row() -> list[Any] | None:
        response = httpx.post(url, json=query, headers=headers, timeout=30)
        assert response.status_code == 200, response.text
        rows = [r["metrics"] for r in response.json()["results"] if r["dimensions"] == [path]]
        return rows[0] if rows and rows[0][0] is not None else None

    wait_for(lambda: page_row() is not None, 240, f"the vitals of {path} in the Stats API")
    lcp, cls = page_row() or []
    beacon, measured = measured_visit.beacon, measured_visit.measured
    assert lcp == beacon["lcp"] and abs(lcp - measured["lcp"]) <= 1, (lcp, beacon, measured)
    assert cls == pytest.approx(round(beacon["cls"], 3), abs=1e-9), (cls, beacon)
    assert abs(cls - measured["cls"]) <= 5e-4 + 1e-4, (cls, measured)  # shown to 3 decimals
