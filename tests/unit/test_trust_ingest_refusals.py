"""Refusals are not free: past ``ratelimit.client_refusals_per_minute`` a client's refusals are
counted, not stored whole, and each count is stored as one summary dead letter when its minute
closes, so raw.rejected still says how many there were."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections import Counter
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from ingest.app import create_app
from ingest.beacon import ParsedBody, Rejection, parse_beacons
from ingest.enrich import RequestFacts, client_hash
from ingest.pipeline import Pipeline
from ingest.ratelimit import MINUTE_MS, RateLimiter, RefusalLimiter
from ingest.spool import Record
from tally.deadletter import DeadLetter
from tally.settings import RateLimitSettings, Settings, SettingsError, SiteSettings
from tests.support.stores import MemoryStore

SITE = "a.example"
LIMIT = 2
MINUTE = int(dt.datetime(2026, 3, 10, 12, 34, tzinfo=dt.UTC).timestamp() * 1000)  # a minute starts
CLIENT, OTHER = "198.18.0.1", "198.18.0.2"
MALFORMED = Rejection(400, "malformed_json", "body is not JSON")


def settings_for(tmp_path: Path, limit: int = LIMIT) -> Settings:
    return Settings(
        home=str(tmp_path),
        sites=(SiteSettings(SITE, domains=(SITE,)),),
        ratelimit=RateLimitSettings(client_refusals_per_minute=limit),
    )


@pytest.fixture
def pipeline(tmp_path: Path) -> tuple[Pipeline, MemoryStore]:
    store = MemoryStore()
    return Pipeline(settings_for(tmp_path), store, RateLimiter(site_events_per_second=1000)), store


def beacon(n: int, **change: Any) -> dict[str, Any]:
    base = {"id": f"0b9f7f2e-8f2a-4c1e-9a53-{n:012x}", "s": SITE, "u": f"https://{SITE}/", "te": MINUTE, "ts": MINUTE}
    return base | change


def accept(pipeline: Pipeline, body: object, ip: str, at: int) -> int:
    parsed = parse_beacons(json.dumps(body).encode(), max_batch=50)
    assert isinstance(parsed, ParsedBody)
    return asyncio.run(pipeline.accept(parsed, RequestFacts(ip, "Mozilla/5.0 Firefox/133.0", at))).status


def summaries(letters: list[DeadLetter]) -> list[dict[str, Any]]:
    return [json.loads(d.payload or "") | {"kind": d.kind} for d in letters if d.message.startswith("suppressed:")]


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_past_the_limit_a_clients_refusals_are_counted_and_summed_up_when_the_minute_closes(
    pipeline: tuple[Pipeline, MemoryStore],
) -> None:
    pipe, store = pipeline
    refused_before = sample("tally_ingest_events_total", outcome="malformed_json")
    suppressed_before = sample("tally_ingest_refusals_suppressed_total", kind="malformed_json")
    for second in range(7):
        outcome = asyncio.run(pipe.refuse(MALFORMED, b"{" * 16000, MINUTE + second * 1000, CLIENT))
        assert outcome.status == 400  # the client is still told why
    asyncio.run(pipe.refuse(MALFORMED, b"{", MINUTE + 9000, OTHER))  # another client has its own allowance
    assert len(store.letters()) == LIMIT + 1
    assert asyncio.run(pipe.store_suppressed(MINUTE + 59_999)) == 0  # the minute is not over yet
    assert asyncio.run(pipe.store_suppressed(MINUTE + MINUTE_MS)) == 1
    letters = store.letters()
    salt = pipe.salts.salt_for(MINUTE)
    assert summaries(letters) == [
        {
            "suppressed": 5,
            "client_hash": client_hash(salt, CLIENT),
            "site_id": "",
            "minute": "2026-03-10T12:34Z",
            "kind": "malformed_json",
        }
    ]
    summary = letters[-1]
    assert (
        summary.status == 400 and summary.received_at == MINUTE + 6000 and summary.component["name"] == "tally-ingest"
    )
    assert summary.message.startswith("suppressed: 5 more malformed_json refusals from one client")
    # Nothing lost: 8 refusals = 3 stored whole + 5 in the summary, and every one is counted.
    assert sample("tally_ingest_events_total", outcome="malformed_json") - refused_before == 8
    assert sample("tally_ingest_refusals_suppressed_total", kind="malformed_json") - suppressed_before == 5
    assert asyncio.run(pipe.store_suppressed(MINUTE + 2 * MINUTE_MS)) == 0  # handed out once


def test_counts_are_kept_per_site_and_kind_and_an_unknown_site_id_makes_no_key_of_its_own(
    pipeline: tuple[Pipeline, MemoryStore],
) -> None:
    pipe, store = pipeline
    bad = [beacon(1, te="x"), beacon(2, u="https://evil.example/")] + [beacon(3 + n, s=f"nope{n}") for n in range(5)]
    assert accept(pipe, bad, CLIENT, MINUTE + 5) == 422
    assert accept(pipe, [beacon(9, te="y")], CLIENT, MINUTE + 6) == 422
    asyncio.run(pipe.store_suppressed(MINUTE + MINUTE_MS))
    letters = store.letters()
    assert len(letters) - len(summaries(letters)) == LIMIT
    counted = {(s["site_id"], s["kind"]): s["suppressed"] for s in summaries(letters)}
    assert counted == {("", "unknown_site"): 5, (SITE, "invalid_event"): 1}  # the first two items were stored


def test_a_client_over_its_refusal_limit_still_has_its_good_events_accepted(
    pipeline: tuple[Pipeline, MemoryStore],
) -> None:
    pipe, store = pipeline
    for n in range(5):
        asyncio.run(pipe.refuse(MALFORMED, b"{", MINUTE + n, CLIENT))
    assert accept(pipe, beacon(1), CLIENT, MINUTE + 10) == 202
    assert [t for t, _, _ in store.appends[-1]] == ["pageviews"]


def test_stopping_stores_the_counts_of_the_minute_still_open(pipeline: tuple[Pipeline, MemoryStore]) -> None:
    pipe, store = pipeline
    for n in range(LIMIT + 2):
        asyncio.run(pipe.refuse(MALFORMED, b"{", MINUTE + n, CLIENT))
    assert asyncio.run(pipe.store_suppressed()) == 1
    assert [s["suppressed"] for s in summaries(store.letters())] == [2]


def test_a_limit_of_zero_stores_every_refusal_whole(tmp_path: Path) -> None:
    store = MemoryStore()
    pipe = Pipeline(settings_for(tmp_path, limit=0), store, RateLimiter(site_events_per_second=1000))
    for n in range(20):
        asyncio.run(pipe.refuse(MALFORMED, b"{", MINUTE + n, CLIENT))
    assert len(store.letters()) == 20 and asyncio.run(pipe.store_suppressed()) == 0


def test_the_endpoint_stores_a_clients_refusals_within_its_limit(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    app, store = create_app(settings), MemoryStore()
    app.state.pipeline = Pipeline(settings, store, app.state.limiter)

    async def post(peer: str) -> int:
        scope = {
            "type": "http",
            "method": "POST",
            "path": "/api/event",
            "headers": [(b"content-type", b"application/x-www-form-urlencoded")],
            "client": (peer, 40000),
        }
        messages = [{"type": "http.request", "body": b"x" * 10_000, "more_body": False}]
        sent: list[MutableMapping[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return messages.pop(0)

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(message)

        await app(scope, receive, send)
        return int(sent[0]["status"])

    assert [asyncio.run(post(CLIENT)) for _ in range(50)] == [415] * 50
    assert asyncio.run(post(OTHER)) == 415
    assert len(store.letters()) == LIMIT + 1  # not 51 dead letters of 10 kB each


def test_the_refusal_limiter_hands_out_each_minutes_counts_once() -> None:
    limiter = RefusalLimiter(per_minute=1)
    admitted = [
        limiter.admit(client_hash="c", site_id="", kind=kind, status=400, now_ms=MINUTE + n)
        for n, kind in enumerate(["malformed_json", "malformed_json", "empty_batch", "malformed_json"])
    ]
    assert admitted == [True, False, False, False]
    assert limiter.closed(MINUTE + 59_999) == []
    assert limiter.admit(client_hash="c", site_id="", kind="malformed_json", status=400, now_ms=MINUTE + MINUTE_MS)
    closed = limiter.closed(MINUTE + MINUTE_MS + 1)
    assert Counter({(c.kind, c.minute_ms): c.count for c in closed}) == Counter(
        {("malformed_json", MINUTE): 2, ("empty_batch", MINUTE): 1}
    )
    assert limiter.closed(MINUTE + 3 * MINUTE_MS) == [] and limiter.drain() == []


def test_a_negative_refusal_limit_is_a_settings_error_naming_the_key() -> None:
    with pytest.raises(SettingsError, match=r"ratelimit.client_refusals_per_minute: -1 must be 0 \(no limit\) or more"):
        RateLimitSettings(client_refusals_per_minute=-1)


class BrokenStore(MemoryStore):
    """Kafka down and the spool's disk failing."""

    async def append(self, records: list[Record]) -> str:
        raise OSError(28, "No space left on device")


def test_counts_that_cannot_be_stored_are_logged_with_how_many_refusals_they_held(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pipe = Pipeline(settings_for(tmp_path), MemoryStore(), RateLimiter(site_events_per_second=1000))
    for n in range(LIMIT + 4):
        asyncio.run(pipe.refuse(MALFORMED, b"{", MINUTE + n, CLIENT))
    pipe.store = BrokenStore()
    assert asyncio.run(pipe.store_suppressed(MINUTE + MINUTE_MS)) == 0  # the flushing task keeps going
    [record] = [r for r in caplog.records if r.getMessage() == "refusal counts not stored"]
    assert record.levelname == "ERROR" and getattr(record, "fields", {})["refusals"] == 4


def test_a_refusal_stamped_in_an_earlier_minute_does_not_reopen_it() -> None:
    # A slow body carries the minute it started in; reopening that minute would reset every allowance.
    limiter = RefusalLimiter(per_minute=1)
    now = 5 * MINUTE_MS

    def admit(at_ms: int) -> bool:
        return limiter.admit(client_hash="c", site_id="", kind="invalid_json", status=400, now_ms=at_ms)

    assert admit(now + 1)
    assert not admit(now - 1), "the earlier minute is not opened again"
    assert not admit(now + 2)
