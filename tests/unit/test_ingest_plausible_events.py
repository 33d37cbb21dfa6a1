"""Plausible's Events API body on ``POST /api/event``, through the whole app with an in-memory store.

Bodies are those Plausible's npm tracker sends (short keys, ``@plausible-analytics/tracker``
0.4.6) and its documented long form; each case says what is stored, or why it is refused.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from ingest.app import create_app
from ingest.pipeline import Pipeline
from tally.deadletter import DeadLetter
from tally.settings import Settings, SiteSettings
from tests.faults import payloads
from tests.support.stores import MemoryStore

SITE, OTHER = "a.example", "b.example"
PAGE = f"https://{SITE}/pricing?utm_source=news&token=secret#top"
FIREFOX = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"
FUZZ = settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))


class Ingest:
    """The app with its pipeline wired as the lifespan would, on the in-memory store."""

    def __init__(self, home: Path) -> None:
        sites = (
            SiteSettings(SITE, domains=(SITE, "www.a.example", "shop.a.example")),
            SiteSettings(OTHER, domains=(OTHER,)),
        )
        self.settings = Settings(home=str(home), sites=sites)
        app = create_app(self.settings)
        self.store = MemoryStore()
        app.state.pipeline = Pipeline(self.settings, self.store, app.state.limiter)
        self.client = TestClient(app, client=("198.18.0.7", 4000))

    def post(self, body: Any, content_type: str = "text/plain") -> tuple[int, dict[str, Any]]:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = {"Content-Type": content_type, "User-Agent": FIREFOX}
        response = self.client.post("/api/event", content=content, headers=headers)
        return response.status_code, response.json()

    def events(self) -> list[dict[str, Any]]:
        topic = self.settings.kafka.pageviews_topic
        return [json.loads(value) for t, _, value in self.store.records if t == topic]

    def dead_letters(self) -> list[DeadLetter]:
        topic = self.settings.kafka.rejected_topic
        return [DeadLetter.from_json(value) for t, _, value in self.store.records if t == topic]


@pytest.fixture
def ingest(tmp_path: Path) -> Ingest:
    return Ingest(tmp_path)


# What the npm tracker sends (plausible.js): v is its own version, r is null without a referrer.
SHORT_PAGEVIEW = {"n": "pageview", "v": 36, "u": PAGE, "d": SITE, "r": "https://news.example/story?id=9"}
SHORT_EVENT = {"n": "signup", "v": 36, "u": PAGE, "d": SITE, "r": None, "p": {"plan": "pro", "seats": 3}, "i": False}
SHORT_ENGAGEMENT = {"n": "engagement", "sd": 40, "d": SITE, "u": PAGE, "p": {"plan": "pro"}, "e": 5210, "v": 36}
LONG_EVENT = {
    "name": "=signup",
    "url": PAGE,
    "domain": SITE,
    "referrer": "https://news.example/story",
    "props": {"plan": "pro"},
    "interactive": True,
    "revenue": {"amount": 15.99, "currency": "USD"},
}


@pytest.mark.parametrize(
    "body, stored",
    [
        (SHORT_PAGEVIEW, {"type": "pageview", "name": None, "props": {}, "referrer": "https://news.example/story"}),
        (SHORT_EVENT, {"type": "event", "name": "signup", "props": {"plan": "pro", "seats": "3"}, "referrer": None}),
        (SHORT_ENGAGEMENT, {"type": "engagement", "props": {}, "engagement_ms": 5210, "scroll_depth": 40}),
        (LONG_EVENT, {"type": "event", "name": "'=signup", "props": {"plan": "pro"}}),  # formula neutralised
        ({"name": "pageview", "url": PAGE}, {"type": "pageview", "site_id": SITE}),  # no domain: the page's host
        ({"n": 404, "u": PAGE, "d": SITE, "m": '{"path": "/gone"}'}, {"name": "404", "props": {"path": "/gone"}}),
        ({**SHORT_EVENT, "p": {"a": None, "b": "", "c": [1], "d": {"e": 1}, "f": "x"}}, {"props": {"f": "x"}}),
        ({**SHORT_ENGAGEMENT, "e": "1500", "sd": "bad"}, {"engagement_ms": 1500, "scroll_depth": None}),
        ({**SHORT_PAGEVIEW, "d": " www.A.example "}, {"site_id": SITE}),
        ({**SHORT_PAGEVIEW, "d": "shop.a.example"}, {"site_id": SITE}),  # one of the site's domains
    ],
    ids=["short-pageview", "short-event", "engagement", "long-form", "no-domain", "numeric-name-meta-string",
         "plausible-prop-filter", "engagement-strings", "www-and-case", "site-domain"],
)  # fmt: skip
def test_a_plausible_body_is_stored_as_tally_s_event(ingest: Ingest, body: dict[str, Any], stored: Any) -> None:
    status, answer = ingest.post(body)
    assert (status, answer) == (202, {"accepted": 1})
    (event,) = ingest.events()
    assert {key: event[key] for key in stored} == stored
    assert event["site_id"] == SITE and event["path"] == "/pricing"
    # The URL privacy rules of Tally's own body: tracked parameters kept, the rest and the fragment dropped.
    assert event["url"] == f"https://{SITE}/pricing?utm_source=news" and event["utm_source"] == "news"
    assert uuid.UUID(event["event_id"]).version == 4
    assert event["ts_event"] == event["ts_sent"] == event["ts_received"] == event["event_time"]
    assert event["browser"] == "Firefox" and not event["is_bot"] and event["visitor_id"]


def test_a_plausible_event_counts_the_visitor_as_tally_s_own_body_does(ingest: Ingest) -> None:
    ingest.post(SHORT_PAGEVIEW)
    now = ingest.events()[0]["ts_received"]
    ingest.post({"id": str(uuid.uuid4()), "s": SITE, "u": PAGE, "te": now, "ts": now})  # Tally's own body
    first, second = ingest.events()
    assert first["visitor_id"] == second["visitor_id"] and first["client_hash"] == second["client_hash"]


def test_a_retried_request_counts_twice_each_time_with_its_own_id(ingest: Ingest) -> None:
    assert ingest.post(SHORT_PAGEVIEW)[0] == ingest.post(SHORT_PAGEVIEW)[0] == 202
    first, second = ingest.events()
    assert first["event_id"] != second["event_id"] and first["path"] == second["path"]


def test_a_comma_separated_domain_records_one_event_per_site_and_dead_letters_unknown_ones(ingest: Ingest) -> None:
    body = {**SHORT_PAGEVIEW, "d": f"{SITE},{OTHER},nowhere.example", "u": f"https://{SITE}/"}
    status, answer = ingest.post(body)
    # b.example's domains do not include a.example's page: refused like Tally's own beacon.
    assert (status, answer) == (202, {"accepted": 1})
    assert [e["site_id"] for e in ingest.events()] == [SITE]
    letters = ingest.dead_letters()
    assert sorted(letter.kind for letter in letters) == ["foreign_host", "unknown_site"]


@pytest.mark.parametrize(
    "body, status, kind, says",
    [
        ({**SHORT_PAGEVIEW, "d": "nowhere.example"}, 403, "unknown_site", "or under sites:"),
        ({**SHORT_PAGEVIEW, "u": "https://elsewhere.example/"}, 403, "foreign_host", "does not belong"),
        ({**SHORT_PAGEVIEW, "n": ""}, 422, "invalid_event", "n: is required"),
        ({**SHORT_PAGEVIEW, "n": ["pageview"]}, 422, "invalid_event", "n: is required"),
        ({**SHORT_PAGEVIEW, "n": "x" * 257}, 422, "invalid_event", "one or more fields"),
        ({"d": SITE, "n": "pageview"}, 422, "invalid_event", "u: is required"),
        ({**SHORT_PAGEVIEW, "u": 7}, 422, "invalid_event", "u: is required"),
        ({**SHORT_PAGEVIEW, "u": "ftp://a.example/"}, 422, "invalid_url", "absolute http(s) URL"),
        ({**SHORT_PAGEVIEW, "u": "/relative/path"}, 422, "invalid_url", "absolute http(s) URL"),
        ({**SHORT_PAGEVIEW, "u": "https://a.example/" + "x" * 2000}, 422, "invalid_event", "one or more fields"),
        ({**SHORT_PAGEVIEW, "d": " , "}, 422, "invalid_event", "d: can't be blank"),
        ({**SHORT_PAGEVIEW, "d": 42}, 422, "invalid_event", "d: must be a string"),
        ({**SHORT_PAGEVIEW, "d": ",".join(f"s{i}.example" for i in range(11))}, 422, "invalid_event", "at most 10"),
        ({**SHORT_EVENT, "p": {f"k{i}": "v" for i in range(21)}}, 422, "invalid_event", "at most 20 properties"),
        ({**SHORT_EVENT, "p": {"plan": "x" * 257}}, 422, "invalid_event", "at most 256 characters"),
        ({**SHORT_EVENT, "p": {"k" * 65: "v"}}, 422, "invalid_event", "1-64 characters"),
        ({**SHORT_EVENT, "p": ["plan"]}, 422, "invalid_event", "p: must be an object"),
        ({**SHORT_EVENT, "p": "{not json"}, 422, "invalid_event", "p: must be an object"),
        ({**SHORT_EVENT, "n": "sign\ud800up"}, 422, "invalid_event", "n: must be valid Unicode"),
        # A lone surrogate in a property's value once reached the stored event's encoder: a 500.
        ({**SHORT_EVENT, "p": {"k": "\ud800"}}, 422, "invalid_event", "p.k: must be valid Unicode"),
        ({**SHORT_PAGEVIEW, "r": "https://x.example/\udfff"}, 422, "invalid_event", "r: must be valid Unicode"),
        ({**SHORT_PAGEVIEW, "d": "a.example,\ud800.example"}, 422, "invalid_event", "d: must be valid Unicode"),
        ({**SHORT_ENGAGEMENT, "sd": None, "e": None}, 422, "invalid_event", "at least one of 'sd' or 'e'"),
        ({**SHORT_ENGAGEMENT, "sd": -1, "e": 40 * 86_400_000}, 422, "invalid_event", "at least one of 'sd' or 'e'"),
    ],
)
def test_a_bad_plausible_body_is_refused_with_what_to_fix_and_dead_lettered(
    ingest: Ingest, body: dict[str, Any], status: int, kind: str, says: str
) -> None:
    got, answer = ingest.post(body)
    assert (got, answer["error"]) == (status, kind), answer
    assert says in answer["message"] + json.dumps(answer.get("errors", [])), answer
    assert ingest.events() == []
    assert [letter.kind for letter in ingest.dead_letters()] == [kind]


@pytest.mark.parametrize(
    "sd, e, stored",
    [(40, 5210, (40, 5210)), ("40", "5210", (40, 5210)), ("+7", None, (7, None)), (0, 1, (0, 1)),
     (100, 1, (100, 1)), (101, 1, (100, 1)), (10**30, 1, (100, 1)), ("9" * 40, 1, (100, 1)),
     (-1, 1, (None, 1)), (50.5, 1, (None, 1)), (True, 1, (None, 1)), ({"a": 1}, 1, (None, 1)), ("4 0", 1, (None, 1)),
     ("9" * 5000, 1, (None, 1)),
     (40, 0, (40, None)), (40, None, (40, None)), (40, 2 * 86_400_000, (40, None)), (40, -5, (40, None))],
    ids=["both", "strings", "plus-sign-no-time", "zero-depth", "full-depth", "over-100-clamped", "huge-clamped",
         "huge-string-clamped", "negative-no-depth", "float-no-depth", "bool-no-depth", "object-no-depth",
         "spaced-string-no-depth", "digits-past-python-no-depth", "depth-without-time", "depth-time-missing",
         "depth-time-over-a-day", "depth-negative-time"],
)  # fmt: skip
def test_plausible_s_scroll_depth_is_kept_as_plausible_reads_it(
    ingest: Ingest, sd: Any, e: Any, stored: tuple[int | None, int | None]
) -> None:
    status, answer = ingest.post({**SHORT_ENGAGEMENT, "sd": sd, "e": e})
    assert (status, answer) == (202, {"accepted": 1})
    (event,) = ingest.events()
    assert (event["type"], event["scroll_depth"], event["engagement_ms"]) == ("engagement", *stored)


@pytest.mark.parametrize(
    "change, reason",
    [({"e": 0}, "engagement_without_time"), ({"e": 0, "sd": -3}, "engagement_without_time"),
     ({"e": 2 * 86_400_000}, "engagement_over_a_day"), ({"e": 2 * 86_400_000, "sd": "x"}, "engagement_over_a_day")],
)  # fmt: skip
def test_an_engagement_with_neither_time_nor_scroll_depth_tally_keeps_is_answered_as_a_success_but_not_stored(
    ingest: Ingest, change: dict[str, Any], reason: str
) -> None:
    body = {key: value for key, value in SHORT_ENGAGEMENT.items() if key != "sd"}
    status, answer = ingest.post({**body, **change})
    assert (status, answer["accepted"], answer["skipped"]) == (202, 0, reason)
    assert ingest.store.records == []


@pytest.mark.parametrize(
    "body, status, kind",
    [
        (b"{not json", 400, "malformed_json"),
        (b"[]", 400, "empty_batch"),
        (b'{"x": 1}', 422, "invalid_event"),  # neither body
        (json.dumps({**SHORT_PAGEVIEW, "id": str(uuid.uuid4())}).encode(), 422, "invalid_event"),  # Tally's keys win
        (b'{"n": 1' + b"0" * 5000 + b', "d": "a.example"}', 400, "malformed_json"),  # past Python's int digits
        (b"[" * 30_000, 400, "malformed_json"),
    ],
)
def test_a_body_that_is_not_plausible_s_gets_tally_s_own_answer(
    ingest: Ingest, body: bytes, status: int, kind: str
) -> None:
    got, answer = ingest.post(body)
    assert (got, answer["error"]) == (status, kind), answer


def test_tally_s_own_body_is_read_as_before(ingest: Ingest) -> None:
    now = 1_795_000_000_000
    beacon = {"id": str(uuid.uuid4()), "s": SITE, "u": PAGE, "te": now, "ts": now, "n": "x", "k": "event"}
    assert ingest.post(beacon, "application/json") == (202, {"accepted": 1})
    assert ingest.events()[0]["event_id"] == beacon["id"]


# Mostly what a tracker sends, each value sometimes odd text or any JSON at all: accepted, refused and skipped events.
plausible_bodies = payloads.plausible_bodies(site=SITE, other=OTHER)


@FUZZ
@given(body=plausible_bodies, content_type=st.sampled_from(["text/plain", "application/json", "text/xml"]))
def test_no_plausible_body_is_answered_with_a_server_error(
    tmp_path_factory: pytest.TempPathFactory, body: dict[str, Any], content_type: str
) -> None:
    ingest = Ingest(tmp_path_factory.mktemp("fuzz"))
    status, answer = ingest.post(payloads.json_body(body), content_type)
    assert status < 500, (body, answer)
    assert status != 202 or answer["accepted"] == len(ingest.events())
    if status >= 400:  # every refusal is a dead letter, as for Tally's own body
        assert ingest.dead_letters(), (body, answer)


@FUZZ
@given(body=st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_no_bytes_at_all_are_answered_with_a_server_error(
    tmp_path_factory: pytest.TempPathFactory, body: bytes
) -> None:
    ingest = Ingest(tmp_path_factory.mktemp("bytes"))
    assert ingest.post(body)[0] < 500


def test_a_plausible_event_for_a_domain_added_at_runtime_is_accepted_and_once_removed_refused(tmp_path: Path) -> None:
    from starlette.applications import Starlette

    from tally.site_registry import encode_removal, encode_site

    ingest = Ingest(tmp_path)
    app: Starlette = ingest.client.app  # type: ignore[assignment]
    sites = app.state.sites  # what the worker's follower feeds; here, records applied by hand
    app.state.pipeline = Pipeline(ingest.settings, ingest.store, app.state.limiter, sites=sites)
    new = "c.example"
    body = {**SHORT_PAGEVIEW, "d": f"www.{new}", "u": f"https://www.{new}/"}
    assert ingest.post(body)[0] == 403
    sites.apply(new.encode(), encode_site(SiteSettings(new, domains=(new, f"www.{new}")), at_ms=1))
    assert ingest.post(body) == (202, {"accepted": 1})
    sites.apply(new.encode(), encode_removal(at_ms=2))
    status, answer = ingest.post(body)
    assert (status, answer["error"]) == (403, "unknown_site")
