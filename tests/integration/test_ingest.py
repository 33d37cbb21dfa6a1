"""The ingest endpoint against a real broker: answers, dead letters, limits, the no-JS pixel,
and the metrics on a loopback port of their own."""

from __future__ import annotations

import datetime as dt
import functools
import gzip
import json
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any, NamedTuple

import httpx
import pytest

from ingest.enrich import client_hash
from ops.processes import Service, Supervisor
from ops.stack import free_ports, http_ok
from tally.deadletter import DeadLetter
from tally.schema import PageViewEvent
from tally.settings import Settings
from tests.integration.conftest import wait_for
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


class Ingest(NamedTuple):
    url: str  # the public port
    metrics: str  # 127.0.0.1:<its metrics port>


def start_ingest(supervisor: Supervisor, name: str, env: dict[str, str] | None = None) -> Ingest:
    """An ingest server of its own, with its metrics on a free loopback port (conf/test.yaml turns
    them off: a session runs several ingest servers)."""
    port, metrics_port = free_ports(2)
    command = [sys.executable, "-m", "ingest", "--port", str(port), "--metrics-port", str(metrics_port)]
    url = f"http://127.0.0.1:{port}"
    supervisor.start(
        Service(name, command, port=port, env=env or {}, ready=functools.partial(http_ok, url + "/healthz"))
    )
    return Ingest(url, f"http://127.0.0.1:{metrics_port}")


@pytest.fixture(scope="module")
def metered(supervisor: Supervisor, kafka: str) -> Iterator[Ingest]:
    yield start_ingest(supervisor, "ingest-metered")
    supervisor.stop("ingest-metered")


def test_snippet_spec_and_health_are_served_and_metrics_only_on_loopback(ingest_url: str, metered: Ingest) -> None:
    snippet = httpx.get(f"{ingest_url}/t.js")
    assert snippet.status_code == 200 and "javascript" in snippet.headers["content-type"]
    assert len(gzip.compress(snippet.content, 9)) <= 1024
    spec = httpx.get(f"{ingest_url}/openapi.json").json()
    assert "/api/event" in spec["paths"] and "Beacon" in spec["components"]["schemas"]
    assert "/metrics" not in spec["paths"]
    assert httpx.get(f"{ingest_url}/healthz").json()["status"] == "ok"
    assert httpx.get(f"{metered.url}/metrics").status_code == 404  # not on the public port
    assert "tally_ingest_stored_total" in httpx.get(f"{metered.metrics}/metrics").text


def counted(metrics: str, sample: str) -> float:
    """One sample of ingest's metrics, e.g. ``tally_ingest_events_total{outcome="accepted"}``; 0 when absent."""
    for line in httpx.get(f"{metrics}/metrics").text.splitlines():
        name, _, value = line.rpartition(" ")
        if name == sample:
            return float(value)
    return 0.0


def test_metrics_count_every_accepted_event_within_a_few_seconds(settings: Settings, metered: Ingest) -> None:
    """Accepted events are counted in memory and flushed in bulk every second; the loopback
    metrics, summed over the workers by the server process, show them right after."""
    accepted, stored = 'tally_ingest_events_total{outcome="accepted"}', 'tally_ingest_stored_total{store="kafka"}'
    before = counted(metered.metrics, accepted), counted(metered.metrics, stored)
    site = settings.sites[0].site_id
    assert post(metered.url, json.dumps([beacon(site), beacon(site)]).encode()).status_code == 202
    assert post(metered.url, json.dumps(beacon(site)).encode()).status_code == 202
    expected = (before[0] + 3, before[1] + 3)
    wait_for(
        lambda: (counted(metered.metrics, accepted), counted(metered.metrics, stored)) == expected, 5, "the counts"
    )


def test_a_clients_refusals_past_its_limit_are_counted_in_a_summary_dead_letter(
    settings: Settings, supervisor: Supervisor, kafka: str
) -> None:
    """Whole dead letters up to ratelimit.client_refusals_per_minute; the rest are counted and
    stored as one summary when the minute closes, or, as here, when ingest stops."""
    limit, sent, ip = 3, 10, f"198.51.100.{uuid.uuid4().int % 250 + 1}"
    refusing = start_ingest(supervisor, "ingest-refusals", {"TALLY_RATELIMIT__CLIENT_REFUSALS_PER_MINUTE": str(limit)})
    marker = f"MARK-{uuid.uuid4().hex}"
    headers = {"Content-Type": "text/plain", "X-Forwarded-For": ip}  # the loopback peer is a trusted proxy
    try:
        for _ in range(sent):
            response = httpx.post(f"{refusing.url}/api/event", content=f'{{"{marker}": ', headers=headers, timeout=10)
            assert response.status_code == 400
    finally:
        supervisor.stop("ingest-refusals")  # stopping stores the counts of the open minute
    salt = bytes.fromhex((settings.home_dir / "salts" / f"{dt.datetime.now(dt.UTC).date()}.salt").read_text())
    letters = dead_letters(settings)
    whole = [d for d in letters if marker in (d.payload or "")]
    summaries = [json.loads(d.payload or "") for d in letters if d.message.startswith("suppressed:")]
    suppressed = sum(s["suppressed"] for s in summaries if s["client_hash"] == client_hash(salt, ip))
    assert limit <= len(whole) < sent  # more than `limit` only if the requests straddled a minute
    assert len(whole) + suppressed == sent, "every refusal is stored whole or counted"
