"""Sites that honour Do-Not-Track / Global Privacy Control drop an opted-out request's events unstored."""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from ingest.app import create_app
from ingest.beacon import ParsedBody, parse_beacons
from ingest.enrich import RequestFacts, opt_out_signalled
from ingest.pipeline import Outcome, Pipeline
from ingest.ratelimit import RateLimiter
from tally.settings import Settings, SiteSettings
from tests.support.stores import MemoryStore

HONOURS = "private.example"
IGNORES = "plain.example"
NOW = 1_795_000_000_000


def pipeline(tmp_path: Path) -> tuple[Pipeline, MemoryStore]:
    settings = Settings(
        home=str(tmp_path),
        sites=(
            SiteSettings(HONOURS, domains=(HONOURS,), honour_opt_out=True),
            SiteSettings(IGNORES, domains=(IGNORES,)),
        ),
    )
    store = MemoryStore()
    return Pipeline(settings, store, RateLimiter(site_events_per_second=1000)), store


def beacon(n: int, site: str, **change: Any) -> dict[str, Any]:
    return {
        "id": f"0b9f7f2e-8f2a-4c1e-9a53-{n:012x}",
        "s": site,
        "u": f"https://{site}/p{n}",
        "te": NOW,
        "ts": NOW,
    } | change


def send(pipe: Pipeline, body: object, *, opted_out: bool) -> Outcome:
    parsed = parse_beacons(json.dumps(body).encode(), max_batch=50)
    assert isinstance(parsed, ParsedBody)
    facts = RequestFacts("198.18.0.1", "Mozilla/5.0 Firefox/133.0", NOW + 5, opted_out)
    return asyncio.run(pipe.accept(parsed, facts))


def stored_sites(store: MemoryStore) -> list[str]:
    return [
        json.loads(value)["site_id"] for records in store.appends for topic, _, value in records if topic == "pageviews"
    ]


def test_dnt_or_gpc_set_to_one_signals_an_opt_out_and_anything_else_does_not() -> None:
    assert opt_out_signalled("1", "")
    assert opt_out_signalled("", "1")
    assert opt_out_signalled(" 1 ", "")
    assert not opt_out_signalled("0", "0")
    assert not opt_out_signalled("", "")
    assert not opt_out_signalled("yes", "true")


def test_an_opted_out_visitor_of_a_site_that_honours_it_is_answered_202_and_nothing_is_stored(tmp_path: Path) -> None:
    pipe, store = pipeline(tmp_path)
    outcome = send(pipe, beacon(1, HONOURS), opted_out=True)
    assert outcome.status == 202
    assert outcome.body == {"accepted": 0, "ignored": 1, "reason": "opt-out"}
    assert store.appends == []


def test_the_same_visitor_is_counted_on_a_site_that_does_not_honour_opt_outs(tmp_path: Path) -> None:
    pipe, store = pipeline(tmp_path)
    outcome = send(pipe, beacon(1, IGNORES), opted_out=True)
    assert outcome.status == 202 and outcome.body == {"accepted": 1}
    assert stored_sites(store) == [IGNORES]


def test_a_visitor_without_the_signal_is_counted_on_a_site_that_honours_opt_outs(tmp_path: Path) -> None:
    pipe, store = pipeline(tmp_path)
    outcome = send(pipe, beacon(1, HONOURS), opted_out=False)
    assert outcome.status == 202 and outcome.body == {"accepted": 1}
    assert stored_sites(store) == [HONOURS]


def test_a_batch_for_two_sites_keeps_only_the_events_of_the_site_that_ignores_opt_outs(tmp_path: Path) -> None:
    pipe, store = pipeline(tmp_path)
    outcome = send(pipe, [beacon(1, HONOURS), beacon(2, IGNORES), beacon(3, HONOURS)], opted_out=True)
    assert outcome.status == 202
    assert outcome.body == {"accepted": 1, "ignored": 2, "reason": "opt-out"}
    assert stored_sites(store) == [IGNORES]


def test_a_malformed_beacon_of_an_opted_out_visitor_is_still_refused(tmp_path: Path) -> None:
    pipe, _ = pipeline(tmp_path)
    outcome = send(pipe, beacon(1, HONOURS, te="x"), opted_out=True)
    assert outcome.status == 422


def test_the_endpoint_reads_the_dnt_and_sec_gpc_headers_of_the_request(tmp_path: Path) -> None:
    settings = Settings(home=str(tmp_path), sites=(SiteSettings(HONOURS, domains=(HONOURS,), honour_opt_out=True),))
    app, store = create_app(settings), MemoryStore()
    app.state.pipeline = Pipeline(settings, store, app.state.limiter)  # what the lifespan does, without Kafka

    async def post(*headers: tuple[bytes, bytes]) -> bytes:
        scope = {
            "type": "http",
            "method": "POST",
            "path": "/api/event",
            "headers": [(b"content-type", b"text/plain"), *headers],
            "client": ("10.0.0.9", 1),
        }
        messages = [{"type": "http.request", "body": json.dumps(beacon(1, HONOURS)).encode(), "more_body": False}]
        sent: list[MutableMapping[str, Any]] = []

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(message)

        async def receive() -> dict[str, Any]:
            return messages.pop(0)

        await app(scope, receive, send)
        assert sent[0]["status"] == 202
        body: bytes = sent[1]["body"]
        return body

    assert json.loads(asyncio.run(post((b"dnt", b"1")))) == {"accepted": 0, "ignored": 1, "reason": "opt-out"}
    assert json.loads(asyncio.run(post((b"sec-gpc", b"1"))))["reason"] == "opt-out"
    assert store.appends == []
    assert json.loads(asyncio.run(post((b"dnt", b"0")))) == {"accepted": 1}
    assert len(store.appends) == 1
