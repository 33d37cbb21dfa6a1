"""Plausible's official npm tracker (``@plausible-analytics/tracker``, pinned in tracker/package.json)
in a real headless Chromium, pointed at the running stack's ingest: what the page sends, what a
real Kafka consumer then finds, and what the streaming views count."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from tally.settings import PROJECT_ROOT, load_settings
from tests.e2e.conftest import RunningStack, served_folder
from tests.e2e.test_tracker import wait_in_page
from tests.integration.conftest import wait_for
from tests.integration.kafka_reader import read_topic

PACKAGE = PROJECT_ROOT / "tracker" / "node_modules" / "@plausible-analytics" / "tracker"
# A desktop browser's user agent: headless Chromium's own is flagged as a bot and left out of the views.
FIREFOX = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"
# The npm package is an ES module: the page imports it as the bundler would, from the file it ships.
PAGE = """<!doctype html><html><head><title>Plausible e2e</title></head><body><p>Plausible's tracker</p>
<script type="module">
import {{ init, track }} from "./plausible.js";
init({{ domain: "{domain}", endpoint: "{ingest}/api/event", captureOnLocalhost: true }});
window.plausibleTrack = track;
</script></body></html>"""
# The tracker ignores browsers driven by automation (navigator.webdriver) unless this is set.
ALLOW_AUTOMATION = "window.__plausible = true"


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    assert (PACKAGE / "plausible.js").is_file(), "the npm tracker is missing: run `make tracker/node_modules`"
    root = tmp_path_factory.mktemp("plausible-pages")
    with served_folder(root) as url:
        yield url, root


@pytest.fixture
def visitor_page(browser: Any) -> Iterator[Any]:
    """A page with a desktop browser's user agent, open until the test's checks are done: closing it
    hides it, and the tracker then sends one more engagement."""
    page = browser.new_page(user_agent=FIREFOX)
    yield page
    page.close()


def traffic_rows(stack: RunningStack, site: str, marker: str) -> dict[tuple[str, str], tuple[int, int]]:
    """(dimension, value) -> (page views, custom events) in agg.traffic_1d for this test's pages and event."""
    try:
        days = DeltaTable(str(stack.home / "warehouse" / "agg" / "traffic_1d")).to_pyarrow_table(
            columns=["site_id", "dimension", "value", "pageviews", "events"]
        )
    except TableNotFoundError:
        return {}
    mine = days.filter(pc.and_(pc.equal(days["site_id"], site), pc.match_substring(days["value"], marker)))
    totals: dict[tuple[str, str], tuple[int, int]] = {}
    for row in mine.to_pylist():  # one row per day window; the test's events fall in one or two days
        views, events = totals.get((row["dimension"], row["value"]), (0, 0))
        totals[(row["dimension"], row["value"])] = (views + row["pageviews"], events + row["events"])
    return totals


def test_plausible_s_tracker_sends_page_views_and_events_that_tally_stores_and_counts(
    stack: RunningStack, visitor_page: Any, pages: tuple[str, Path]
) -> None:
    base, root = pages
    marker = uuid.uuid4().hex
    site = load_settings().sites[0].site_id
    (root / marker).mkdir()
    shutil.copy(PACKAGE / "plausible.js", root / marker / "plausible.js")
    (root / marker / "index.html").write_text(PAGE.format(domain=site, ingest=stack.ingest_url))

    page = visitor_page
    sent: list[dict[str, Any]] = []
    answers: list[int] = []
    endpoint = f"{stack.ingest_url}/api/event"
    page.on("request", lambda r: sent.append(json.loads(r.post_data)) if r.url == endpoint else None)
    page.on("response", lambda r: answers.append(r.status) if r.url == endpoint else None)
    page.add_init_script(ALLOW_AUTOMATION)
    page.goto(f"{base}/{marker}/index.html")
    wait_in_page(page, lambda: len(sent) == 1, 15, "the tracker's first page view")
    signup = f"signup-{marker}"
    page.evaluate(
        "name => window.plausibleTrack(name, {props: {plan: 'pro'}, callback: r => { window.__answer = r }})", signup
    )
    wait_in_page(page, lambda: page.evaluate("window.__answer !== undefined"), 15, "the custom event's answer")
    # The tracker hands the answer to the page's callback: a status, not an error, is a delivered event.
    assert page.evaluate("window.__answer") == {"status": 202}
    page.evaluate("history.pushState({}, '', 'next')")  # a SPA navigation: an engagement, then a page view
    wait_in_page(page, lambda: sum(b["n"] == "pageview" for b in sent) == 2, 15, "the second page view")
    wait_in_page(page, lambda: len(answers) == len(sent), 15, "an answer to every request")

    # The request bodies: Plausible's short keys, none of Tally's (no id, no device clock).
    first, event = sent[0], sent[1]
    assert {k: v for k, v in first.items() if k != "v"} == {
        "n": "pageview",
        "u": f"{base}/{marker}/index.html",
        "d": site,
        "r": None,
    }
    assert event["n"] == signup and event["p"] == {"plan": "pro"} and event["d"] == site
    assert all(not {"id", "s", "te", "ts"} & body.keys() for body in sent)
    assert set(answers) == {202}, answers
    # Engagement with no engaged time (the headless page may never have had focus) is answered but not stored.
    stored = [b for b in sent if b["n"] != "engagement" or b.get("e")]

    settings = load_settings()
    servers = f"127.0.0.1:{stack.env['TALLY_KAFKA__PORT']}"

    def in_kafka() -> list[dict[str, Any]]:
        rows = [json.loads(v) for _, v in read_topic(servers, settings.kafka.pageviews_topic)]
        return [r for r in rows if marker in r["url"]]

    events: list[dict[str, Any]] = []

    def all_in_kafka() -> bool:
        events[:] = in_kafka()
        return len(events) == len(stored)

    try:
        wait_for(all_in_kafka, 30, f"the page's {len(stored)} events in Kafka")
    except AssertionError as e:
        found = [(k["type"], k["name"], k["path"], k["engagement_ms"]) for k in events]
        raise AssertionError(f"{e}: sent {sent}, found {found}") from None
    assert [(e["type"], e["name"], e["path"]) for e in events if e["type"] != "engagement"] == [
        ("pageview", None, f"/{marker}/index.html"),
        ("event", signup, f"/{marker}/index.html"),
        ("pageview", None, f"/{marker}/next"),
    ]
    assert all(e["site_id"] == site and e["hostname"] == "127.0.0.1" and not e["is_bot"] for e in events)
    assert [e["props"] for e in events if e["type"] == "event"] == [{"plan": "pro"}]
    engaged = [b["e"] for b in stored if b["n"] == "engagement"]
    assert [e["engagement_ms"] for e in events if e["type"] == "engagement"] == engaged
    assert len({e["event_id"] for e in events}) == len(events)  # each one its own id, given on arrival
    assert len({e["visitor_id"] for e in events}) == 1  # one visitor, counted as Tally's own snippet counts

    # The streaming views count them: page views by page, the custom event by name.
    expected = {
        ("page", f"/{marker}/index.html"): (1, 1),
        ("page", f"/{marker}/next"): (1, 0),
        ("event", signup): (0, 1),
    }

    def counted() -> dict[tuple[str, str], tuple[int, int]]:
        found = traffic_rows(stack, site, marker)
        return {key: found.get(key, (0, 0)) for key in expected}

    wait_for(lambda: counted() == expected, 300, f"the views to count the tracker's events as {expected}")
