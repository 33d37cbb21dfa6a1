"""The snippet in a real headless Chromium, against the running stack: what the page sends,
what it must not send, and what a real Kafka consumer then finds."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tally.settings import load_settings
from tests.e2e.conftest import RunningStack, served_folder
from tests.integration.conftest import wait_for
from tests.integration.kafka_reader import read_topic

PAGE = """<!doctype html><html><head><title>Tally e2e</title>
<script defer data-site="{site}" {attrs} src="{ingest}/t.js"></script></head>
<body><a id="out" href="https://example.org/elsewhere">out</a>
<a id="pdf" href="/files/report.pdf" onclick="event.preventDefault()">report</a></body></html>"""


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    root = tmp_path_factory.mktemp("pages")
    with served_folder(root) as url:
        yield url, root


def page_with(root: Path, stack: RunningStack, attrs: str) -> str:
    marker = uuid.uuid4().hex
    (root / marker).mkdir()
    site = load_settings().sites[0].site_id
    (root / marker / "index.html").write_text(PAGE.format(site=site, attrs=attrs, ingest=stack.ingest_url))
    return marker


def wait_in_page(page: Any, condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Like wait_for, but lets Playwright deliver page events while waiting (time.sleep would not)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f}s waiting for {what}"
        page.wait_for_timeout(200)


def open_page(browser: Any, url: str, init_script: str = "") -> tuple[Any, list[dict[str, Any]], list[str]]:
    page = browser.new_page()
    sent: list[dict[str, Any]] = []
    console: list[str] = []
    page.on("request", lambda r: sent.append(json.loads(r.post_data)) if r.url.endswith("/api/event") else None)
    page.on("console", lambda m: console.append(m.text))
    if init_script:
        page.add_init_script(init_script)
    page.goto(url)
    return page, sent, console


def test_a_visit_sends_views_spa_navigation_events_clicks_and_engagement(
    stack: RunningStack, browser: Any, pages: tuple[str, Path]
) -> None:
    base, root = pages
    marker = page_with(root, stack, "data-local data-automation")
    page, sent, _ = open_page(browser, f"{base}/{marker}/index.html")
    wait_in_page(page, lambda: len(sent) == 1, 15, "the first page view")
    page.evaluate("history.pushState({}, '', 'next')")
    page.evaluate("tally('signup', {plan: 'pro'})")
    page.evaluate("""() => { Object.defineProperty(document, 'hidden', {value: true, configurable: true});
                          document.dispatchEvent(new Event('visibilitychange')); }""")
    wait_in_page(page, lambda: len(sent) >= 5, 15, "the engagement of the hidden tab")
    assert page.context.cookies() == [] and page.evaluate("localStorage.length + sessionStorage.length") == 0
    page.click("#out")
    wait_in_page(page, lambda: len(sent) >= 6, 15, "six requests from the page")
    kinds = [(b["k"], b.get("n")) for b in sent]
    # Leaving a page for the SPA route reports the engagement time of the first one.
    assert kinds == [
        ("pageview", None),
        ("engagement", None),
        ("pageview", None),
        ("event", "signup"),
        ("engagement", None),
        ("event", "Outbound Link"),
    ], kinds
    first, _, second, signup, hidden, outbound = sent
    assert first["u"].endswith(f"/{marker}/index.html") and second["u"].endswith(f"/{marker}/next")
    assert "ld" in first and "ld" not in second
    assert signup["p"] == {"plan": "pro"}
    assert outbound["p"]["url"] == "https://example.org/elsewhere"
    assert hidden["e"] > 0 and sent[1]["e"] > 0
    assert isinstance(first["ld"], int) and first["te"] <= first["ts"]
    assert len({b["id"] for b in sent}) == len(sent)  # a fresh UUID per event

    settings = load_settings()
    servers = f"127.0.0.1:{stack.env['TALLY_KAFKA__PORT']}"

    def in_kafka() -> list[dict[str, Any]]:
        rows = [json.loads(v) for _, v in read_topic(servers, settings.kafka.pageviews_topic)]
        return [r for r in rows if marker in r["url"]]

    wait_for(lambda: len(in_kafka()) == len(sent), 30, "the page's events in Kafka")
    events = in_kafka()
    assert {e["event_id"] for e in events} == {b["id"] for b in sent}
    # Headless Chromium says so in its user agent: kept in the log, flagged, excluded from reports.
    assert all(e["browser"] and e["visitor_id"] and e["is_bot"] is True for e in events)
    assert len({e["visitor_id"] for e in events}) == 1  # one visitor across the visit, no cookie needed


@pytest.mark.parametrize(
    "attrs, init_script, reason",
    [
        ("data-local", "", "automation"),  # navigator.webdriver is true under automation
        ("data-automation", "", "localhost"),
        (
            "data-local data-automation data-dnt",
            "Object.defineProperty(navigator, 'doNotTrack', {get: () => '1'})",
            "opt-out",
        ),
    ],
)
def test_ignored_visits_send_nothing_and_say_why(
    stack: RunningStack, browser: Any, pages: tuple[str, Path], attrs: str, init_script: str, reason: str
) -> None:
    base, root = pages
    marker = page_with(root, stack, attrs)
    page, sent, console = open_page(browser, f"{base}/{marker}/index.html", init_script)
    wait_in_page(page, lambda: any(reason in line for line in console), 15, f"the '{reason}' console message")
    page.evaluate("tally('signup')")
    page.wait_for_timeout(1000)
    assert sent == []
