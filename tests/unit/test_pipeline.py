"""What ingest does with one request, against an in-memory store: events and dead letters together."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter

from ingest.beacon import ParsedBody, parse_beacons
from ingest.enrich import RequestFacts
from ingest.pipeline import BufferedCounts, Outcome, Pipeline
from ingest.ratelimit import RateLimiter
from tally.deadletter import DeadLetter
from tally.schema import PageViewEvent
from tally.settings import RateLimitSettings, Settings, SiteSettings
from tests.support.stores import MemoryStore

SITE = "a.example"
NOW = 1_795_000_000_000


def beacon(n: int, **change: Any) -> dict[str, Any]:
    return {
        "id": f"0b9f7f2e-8f2a-4c1e-9a53-{n:012x}",
        "s": SITE,
        "u": f"https://{SITE}/p{n}",
        "te": NOW,
        "ts": NOW,
    } | change


@pytest.fixture
def pipeline(tmp_path: Path) -> tuple[Pipeline, MemoryStore]:
    settings = Settings(
        home=str(tmp_path),
        sites=(SiteSettings(SITE, domains=(SITE,)),),
        ratelimit=RateLimitSettings(client_pageviews_per_hour=3),
    )
    store = MemoryStore()
    return Pipeline(settings, store, RateLimiter(site_events_per_second=1000)), store


def accept(pipeline: Pipeline, body: object, ip: str = "198.18.0.1") -> Outcome:
    parsed = parse_beacons(json.dumps(body).encode(), max_batch=50)
    assert isinstance(parsed, ParsedBody)
    return asyncio.run(pipeline.accept(parsed, RequestFacts(ip, "Mozilla/5.0 Firefox/133.0", NOW + 5)))


def test_a_batch_stores_its_events_and_the_dead_letters_of_its_bad_items_in_one_append(
    pipeline: tuple[Pipeline, MemoryStore],
) -> None:
    pipe, store = pipeline
    outcome = accept(pipe, [beacon(1), beacon(2, te="x"), beacon(3, u="https://evil.example/"), beacon(4, k="event")])
    assert outcome.status == 202 and outcome.body["accepted"] == 2
    assert [r["error"] for r in outcome.body["rejected"]] == ["invalid_event", "foreign_host"]
    (records,) = store.appends
    letters = [DeadLetter.from_json(v) for t, _, v in records if t == pipe.settings.kafka.rejected_topic]
    events = [PageViewEvent.from_json(v) for t, _, v in records if t == pipe.settings.kafka.pageviews_topic]
    assert [d.kind for d in letters] == ["invalid_event", "foreign_host"]
    assert [e.event_id[-1] for e in events] == ["1", "4"]
    assert all(k == e.visitor_id.encode() for (t, k, _), e in zip(records[2:], events, strict=True))
    assert len({e.visitor_id for e in events}) == 1 and events[0].event_time == NOW + 5


def test_a_throttled_request_dead_letters_every_event_with_its_id(pipeline: tuple[Pipeline, MemoryStore]) -> None:
    pipe, store = pipeline
    assert accept(pipe, [beacon(1), beacon(2), beacon(3)]).status == 202
    outcome = accept(pipe, beacon(4))
    assert outcome.status == 429 and int(outcome.headers["Retry-After"]) > 0
    (letter,) = [DeadLetter.from_json(v) for _, _, v in store.appends[-1]]
    assert letter.kind == "rate_limited" and "0b9f7f2e-8f2a-4c1e-9a53-000000000004" in (letter.payload or "")
    assert accept(pipe, beacon(5), ip="198.18.0.2").status == 202, "another client is not limited"


def test_buffered_counts_reach_the_counter_only_when_flushed_and_only_once() -> None:
    registry = CollectorRegistry()
    events = Counter("events_total", "test", ["outcome"], registry=registry)
    accepted = events.labels(outcome="accepted")
    counts = BufferedCounts()
    counts.add(accepted, 2)
    counts.add(accepted, 3)
    assert registry.get_sample_value("events_total", {"outcome": "accepted"}) == 0
    counts.flush()
    counts.flush()  # nothing pending: adds nothing
    assert registry.get_sample_value("events_total", {"outcome": "accepted"}) == 5


def test_a_throttled_events_dead_letter_does_not_say_who_sent_it(pipeline: tuple[Pipeline, MemoryStore]) -> None:
    pipe, store = pipeline
    for n in (1, 2, 3):
        accept(pipe, beacon(n))
    assert accept(pipe, beacon(4)).status == 429
    (letter,) = [DeadLetter.from_json(v) for _, _, v in store.appends[-1]]
    payload = json.loads(letter.payload or "{}")
    assert payload["event_id"].endswith("000000000004")
    assert payload["visitor_id"] == "" and payload["client_hash"] == ""


def test_a_site_added_at_runtime_is_accepted_and_once_removed_refused_as_unknown(
    pipeline: tuple[Pipeline, MemoryStore],
) -> None:
    from tally.site_registry import encode_removal, encode_site

    pipe, _ = pipeline
    new = "c.example"
    sent = beacon(1, s=new, u=f"https://{new}/")
    assert accept(pipe, sent).body["error"] == "unknown_site"
    pipe.sites.apply(new.encode(), encode_site(SiteSettings(new, domains=(new,), hash_routing=True), at_ms=NOW))
    assert accept(pipe, sent).status == 202
    assert accept(pipe, beacon(2, s=new, u="https://evil.example/")).body["error"] == "foreign_host"
    pipe.sites.apply(new.encode(), encode_removal(at_ms=NOW))
    refused = accept(pipe, beacon(3, s=new, u=f"https://{new}/"))
    assert refused.status == 403 and refused.body["error"] == "unknown_site"
    assert "tally site add" in refused.body["message"]


def test_a_throttled_batch_answers_429_even_when_it_also_holds_a_bad_item(
    pipeline: tuple[Pipeline, MemoryStore],
) -> None:
    pipe, _ = pipeline
    outcome = accept(pipe, [beacon(1, te="x"), *(beacon(n) for n in range(2, 6))])  # 4 page views, limit 3
    assert outcome.status == 429 and "Retry-After" in outcome.headers
