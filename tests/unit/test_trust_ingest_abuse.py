"""Bodies a hostile visitor sends: never a 500, never a URL kept whole, each site's own limits.

Each case here was found by a security review of the running stack (odd Unicode reaching the
event's encoder, whole URLs in dead letters of Plausible bodies with mixed domains, a site's limit
bypassed by naming it after another, custom events without a per-client budget).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from ingest import app as ingest_app
from ingest.pipeline import Pipeline
from tally.log import FailureLog
from tally.settings import RateLimitSettings, Settings, SiteSettings
from tests.support.ingest import IngestApp

SITE, OTHER, STRICT = "a.example", "b.example", "strict.example"
TOKEN, EMAIL, QUERY = "tok3n-5ecret-d0c", "ann.secret@mail.example", "q=private+search+terms"
SECRET_PAGE = f"https://{SITE}/reset?token={TOKEN}&email={EMAIL}&utm_source=news#access_token={TOKEN}"
SECRET_REFERRER = f"https://search.example/results?{QUERY}&who={EMAIL}"
SECRETS = (TOKEN, EMAIL, "private+search", "private%2Bsearch", EMAIL.replace("@", "%40"))


def sites() -> tuple[SiteSettings, ...]:
    return (
        SiteSettings(SITE, domains=(SITE,)),
        SiteSettings(OTHER, domains=(OTHER,)),
        SiteSettings(STRICT, client_pageviews_per_hour=1),  # no domains: a roll-up of the others too
    )


def ingest_for(tmp_path: Path, **limits: Any) -> IngestApp:
    ratelimit = RateLimitSettings(**({"client_refusals_per_minute": 0} | limits))
    return IngestApp(Settings(home=str(tmp_path), sites=sites(), ratelimit=ratelimit))


def beacon(site: str = SITE, **change: Any) -> dict[str, Any]:
    now = int(time.time() * 1000)
    return {"id": str(uuid.uuid4()), "s": site, "u": f"https://{site}/p", "te": now, "ts": now} | change


def at_rest(ingest: IngestApp) -> str:
    """Every byte ingest stored, events and dead letters, as one text to search."""
    return "\n".join(value.decode("utf-8", "replace") for _, _, value in ingest.store.records)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (beacon(p={"k": "\ud800"}), "p.k"),
        (beacon(u=f"https://{SITE}/\udfff"), "u"),
        (beacon(ti="title \ud800"), "ti"),
        (beacon(r="https://r.example/\ud83d"), "r"),
        ([beacon(), beacon(p={"plan": "\udc00"})], "[1].p.plan"),
        ({"n": "x", "u": f"https://{SITE}/s", "d": SITE, "p": {"k": "\ud800"}}, "p.k"),  # the review's request
        ({"n": "x", "u": f"https://{SITE}/s", "d": SITE, "p": {"\ud800": "v"}}, "p.\\ud800"),
        ({"name": "pageview", "url": f"https://{SITE}/\ud800", "domain": SITE}, "url"),
        ({"n": "x", "u": f"https://{SITE}/s", "d": SITE, "p": '{"plan": "\\ud800"}'}, "p.plan"),  # props as JSON text
    ],
)
def test_text_that_is_not_unicode_anywhere_in_a_body_is_refused_naming_its_field(
    tmp_path: Path, body: Any, field: str
) -> None:
    ingest = ingest_for(tmp_path)
    status, answer = ingest.post(body)
    batch = isinstance(body, list)
    assert status == (202 if batch else 422), answer
    errors = answer["rejected"][0]["errors"] if batch else answer["errors"]
    assert errors[0]["field"] == field
    assert "valid Unicode" in errors[0]["error"]
    assert len(ingest.letters()) == 1  # a dead letter, as for any refusal
    assert len(ingest.events()) == (1 if batch else 0)  # the valid item of a batch is kept


def test_a_plausible_body_naming_a_configured_and_an_unknown_domain_keeps_no_secret_at_rest(tmp_path: Path) -> None:
    ingest = ingest_for(tmp_path)
    body = {"n": "pageview", "u": SECRET_PAGE, "d": f"{SITE},unknown.example", "r": SECRET_REFERRER}
    status, _ = ingest.post(body)
    assert status == 202
    assert [e["site_id"] for e in ingest.events()] == [SITE]
    (letter,) = ingest.letters()
    assert letter.kind == "unknown_site"
    kept = json.loads(letter.payload or "")
    assert kept["u"] == f"https://{SITE}/reset?utm_source=news"  # what the accepted event keeps of it
    assert kept["r"] == "https://search.example/results"
    assert kept["d"] == f"{SITE},unknown.example"
    stored = at_rest(ingest)
    assert not [secret for secret in SECRETS if secret in stored]


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (beacon(u=SECRET_PAGE, r=SECRET_REFERRER, w="wide"), "text/plain"),  # an invalid field
        (beacon(site="unknown.example", u=SECRET_PAGE, r=SECRET_REFERRER), "text/plain"),
        (beacon(site=OTHER, u=SECRET_PAGE, r=SECRET_REFERRER), "text/plain"),  # a foreign host
        (beacon(u=f"ftp://user:{TOKEN}@{SITE}/x?email={EMAIL}"), "text/plain"),  # not an http URL
        ([beacon(), beacon(u=SECRET_PAGE, r=SECRET_REFERRER, te="late")], "text/plain"),
        (json.dumps(beacon(u=SECRET_PAGE, r=SECRET_REFERRER)).encode()[:-3], "text/plain"),  # not JSON
        (json.dumps(beacon(u=SECRET_PAGE)).replace("/", "\\/").encode() + b"}", "text/plain"),  # escaped, cut
        (f"page={SECRET_PAGE}&from={SECRET_REFERRER}".encode(), "application/x-www-form-urlencoded"),
        (f"see {SECRET_PAGE.replace(':', '%3A').replace('/', '%2F')} now".encode(), "text/plain"),  # encoded
    ],
)
def test_no_dead_letter_keeps_more_of_a_url_than_an_accepted_event_would(
    tmp_path: Path, body: Any, content_type: str
) -> None:
    ingest = ingest_for(tmp_path)
    status, answer = ingest.post(body, content_type)
    assert status < 500, answer
    assert ingest.letters(), "each refusal is a dead letter"
    stored = at_rest(ingest)
    assert not [secret for secret in SECRETS if secret in stored], stored


def test_a_dead_letter_of_a_refused_event_still_holds_what_recovers_it(tmp_path: Path) -> None:
    ingest = ingest_for(tmp_path)
    sent = beacon(u=SECRET_PAGE, r=SECRET_REFERRER, w="wide", ti="Reset your password")
    ingest.post(sent)
    (letter,) = ingest.letters()
    kept = json.loads(letter.payload or "")
    assert {k: kept[k] for k in ("id", "s", "te", "ts", "w", "ti")} == {
        k: sent[k] for k in ("id", "s", "te", "ts", "w", "ti")
    }
    assert kept["u"] == f"https://{SITE}/reset?utm_source=news"


def test_a_site_s_own_client_limit_holds_when_it_is_named_after_another_site(tmp_path: Path) -> None:
    ingest = ingest_for(tmp_path)
    both = {"n": "pageview", "u": f"https://{SITE}/", "d": f"{SITE},{STRICT}"}
    assert ingest.post(both)[0] == 202
    assert ingest.post(both)[0] == 202  # the first site's events are within its limit
    kept = [e["site_id"] for e in ingest.events()]
    assert kept.count(SITE) == 2 and kept.count(STRICT) == 1  # the strict site's own limit: 1 an hour
    assert [letter.kind for letter in ingest.letters()] == ["rate_limited"]
    status, answer = ingest.post([beacon(SITE), beacon(STRICT, u=f"https://{STRICT}/")])
    assert status == 202 and answer["accepted"] == 1 and answer["rejected"][0]["error"] == "rate_limited"


def test_a_client_over_one_site_s_limit_may_still_send_to_another_site(tmp_path: Path) -> None:
    ingest = ingest_for(tmp_path)
    assert ingest.post(beacon(SITE))[0] == 202  # counted for SITE only: STRICT's hour is still unused
    assert ingest.post(beacon(STRICT, u=f"https://{STRICT}/"))[0] == 202
    assert ingest.post(beacon(STRICT, u=f"https://{STRICT}/"))[0] == 429
    assert ingest.post(beacon(SITE))[0] == 202


def test_custom_events_of_one_client_have_their_own_hourly_budget(tmp_path: Path) -> None:
    ingest = ingest_for(tmp_path, client_events_per_hour=5)
    answers = [ingest.post(beacon(k="event", n="signup"))[0] for _ in range(7)]
    assert answers == [202] * 5 + [429] * 2
    assert ingest.post(beacon())[0] == 202  # page views keep their own limit
    batch = [beacon(OTHER, u=f"https://{OTHER}/", k="event", n="click") for _ in range(6)]
    status, answer = ingest.post(batch)
    assert status == 429 and answer["error"] == "rate_limited"  # a batch past the budget is refused whole
    assert "events other than page views per hour" in answer["message"]


def test_the_events_budget_is_a_setting_refused_below_zero() -> None:
    with pytest.raises(ValueError, match=r"ratelimit\.client_events_per_hour"):
        RateLimitSettings(client_events_per_hour=-1)


def test_a_bug_met_by_many_requests_is_logged_in_full_once_then_one_line_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(*_: Any) -> None:
        raise RuntimeError("a bug")

    ingest = ingest_for(tmp_path)
    monkeypatch.setattr(Pipeline, "accept", broken)
    monkeypatch.setattr(ingest_app, "FAILURES", FailureLog(ingest_app.log, ingest_app.FAILURES.event))  # counts from 0
    answers = [ingest.post(beacon()) for _ in range(3)]
    assert {status for status, _ in answers} == {500}
    assert answers[0][1]["error"] == "internal_error"
    failed = [r for r in caplog.records if r.getMessage().startswith("request failed")]
    assert [(r.exc_info is not None, r.fields["count"]) for r in failed] == [(True, 1), (False, 2), (False, 3)]  # type: ignore[attr-defined]
