"""The ingest endpoint against a real broker: answers, dead letters, limits, the no-JS pixel."""

from __future__ import annotations

import gzip
import json
import time
import uuid
from typing import Any

import httpx
import pytest

from tally.deadletter import DeadLetter
from tally.schema import PageViewEvent
from tally.settings import Settings
from tests.integration.kafka_reader import read_topic

FIREFOX = "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"


def beacon(site: str, **change: Any) -> dict[str, Any]:
    now = int(time.time() * 1000)
    return {
        "id": str(uuid.uuid4()),
        "k": "pageview",
        "s": site,
        "u": f"https://{site}/x",
        "te": now,
        "ts": now,
    } | change


def dead_letters(settings: Settings) -> list[DeadLetter]:
    return [DeadLetter.from_json(v) for _, v in read_topic(settings.kafka.servers, settings.kafka.rejected_topic)]


def post(url: str, content: bytes, content_type: str = "text/plain") -> httpx.Response:
    headers = {"Content-Type": content_type, "User-Agent": FIREFOX}
    return httpx.post(f"{url}/api/event", content=content, headers=headers, timeout=10)


@pytest.mark.parametrize(
    "case, body, content_type, status, kind",
    [
        ("malformed json", b'{"id": "MARK", ', "text/plain", 400, "malformed_json"),
        (
            "wrong content type",
            b'{"marker": "MARK"}',
            "application/x-www-form-urlencoded",
            415,
            "unsupported_media_type",
        ),
        ("wrong type", None, "text/plain", 422, "invalid_event"),
        ("unknown site", None, "text/plain", 403, "unknown_site"),
        ("foreign host", None, "text/plain", 403, "foreign_host"),
        ("hostile url", None, "application/json", 422, "invalid_url"),
        ("oversized", None, "text/plain", 413, "body_too_large"),
    ],
)
def test_every_refusal_gets_a_clear_status_and_a_findable_dead_letter(
    settings: Settings, ingest_url: str, case: str, body: bytes | None, content_type: str, status: int, kind: str
) -> None:
    site = settings.sites[0].site_id
    marker = f"MARK-{uuid.uuid4().hex}"
    payloads = {
        "wrong type": beacon(site, te="yesterday", ti=marker),
        "unknown site": beacon("nobody.example", ti=marker) | {"u": "https://nobody.example/"},
        "foreign host": beacon(site, u="https://evil.example/", ti=marker),
        "hostile url": beacon(site, u="javascript:alert(1)", ti=marker),
        "oversized": beacon(site, ti=marker + "x" * (settings.ingest.max_body_bytes + 10)),
    }
    raw = body.replace(b"MARK", marker.encode()) if body else json.dumps(payloads[case]).encode()
    response = post(ingest_url, raw, content_type)
    assert response.status_code == status
    answer = response.json()
    assert answer["error"] == kind and answer["message"]
    matching = [d for d in dead_letters(settings) if marker in (d.payload or "")]
    assert len(matching) == 1, f"{case}: expected exactly one dead letter"
    letter = matching[0]
    assert (letter.kind, letter.status, letter.component["name"]) == (kind, status, "tally-ingest")
    if case == "oversized":
        assert letter.truncated and letter.payload_size == len(raw)
    if case == "wrong type":
        assert letter.errors[0]["field"] == "te (ts_event)"


def test_accepted_events_are_enriched_in_kafka_without_the_ip(settings: Settings, ingest_url: str) -> None:
    site = settings.sites[0].site_id
    sent = beacon(
        site,
        u=f"https://{site}/landing?utm_source=news&utm_medium=email&utm_campaign=fall#top",
        r="https://www.google.com/",
        p={"plan": "=cmd()"},
        k="event",
        n="signup",
    )
    headers = {"User-Agent": FIREFOX, "X-Forwarded-For": "81.2.69.142", "Content-Type": "text/plain"}
    response = httpx.post(f"{ingest_url}/api/event", content=json.dumps(sent), headers=headers)
    assert response.status_code == 202
    raw = [v for _, v in read_topic(settings.kafka.servers, settings.kafka.pageviews_topic) if sent["id"].encode() in v]
    assert len(raw) == 1 and b"81.2.69.142" not in raw[0]
    event = PageViewEvent.from_json(raw[0])
    assert (event.path, event.country, event.browser, event.os, event.device) == (
        "/landing",
        "GB",
        "Firefox",
        "Linux",
        "desktop",
    )
    assert (event.utm_campaign, event.channel, event.props) == ("fall", "Email", {"plan": "'=cmd()"})
    assert len(event.visitor_id) == 32 and event.ts_received >= event.ts_sent - 1


def test_the_pixel_records_a_page_view_for_pages_without_javascript(settings: Settings, ingest_url: str) -> None:
    site = settings.sites[0].site_id
    page = f"https://{site}/noscript-{uuid.uuid4().hex}"
    response = httpx.get(f"{ingest_url}/api/event.gif", params={"s": site}, headers={"Referer": page})
    assert response.status_code == 202 and response.headers["content-type"] == "image/gif"
    found = [v for _, v in read_topic(settings.kafka.servers, settings.kafka.pageviews_topic) if page.encode() in v]
    assert len(found) == 1


def test_snippet_spec_metrics_and_health_are_served(ingest_url: str) -> None:
    snippet = httpx.get(f"{ingest_url}/t.js")
    assert snippet.status_code == 200 and "javascript" in snippet.headers["content-type"]
    assert len(gzip.compress(snippet.content, 9)) <= 1024
    spec = httpx.get(f"{ingest_url}/openapi.json").json()
    assert "/api/event" in spec["paths"] and "Beacon" in spec["components"]["schemas"]
    assert httpx.get(f"{ingest_url}/healthz").json()["status"] == "ok"
    assert "tally_ingest_events_total" in httpx.get(f"{ingest_url}/metrics").text


def counted(url: str, sample: str) -> float:
    """One sample of ingest's /metrics, e.g. ``tally_ingest_events_total{outcome="accepted"}``; 0 when absent."""
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        name, _, value = line.rpartition(" ")
        if name == sample:
            return float(value)
    return 0.0


def test_metrics_count_every_accepted_event_at_once(settings: Settings, ingest_url: str) -> None:
    """Accepted events are counted in memory and flushed in bulk; /metrics must still show them at once."""
    accepted, stored = 'tally_ingest_events_total{outcome="accepted"}', 'tally_ingest_stored_total{store="kafka"}'
    before = counted(ingest_url, accepted), counted(ingest_url, stored)
    site = settings.sites[0].site_id
    assert post(ingest_url, json.dumps([beacon(site), beacon(site)]).encode()).status_code == 202
    assert post(ingest_url, json.dumps(beacon(site)).encode()).status_code == 202
    assert (counted(ingest_url, accepted), counted(ingest_url, stored)) == (before[0] + 3, before[1] + 3)
