"""URLs keep nothing the reports do not read: no tokens, e-mail addresses, search terms or passwords.

A page URL keeps its allowed query parameters only (utm_*, the ad click ids, the site's own
``query_params``) and no ``user:password@``; a referrer keeps its origin and path. Source,
channel and search engine are still worked out from the full referrer.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import msgspec
import pytest

from ingest.beacon import Beacon, ParsedBody, parse_beacons
from ingest.enrich import Client, EnrichError, RequestFacts, enrich, event_record, normalise_url
from ingest.event_record import EventRecord
from ingest.pipeline import Pipeline
from ingest.ratelimit import RateLimiter
from ingest.spool import Record
from ingest.urls import allowed_query, stored_referrer
from tally.settings import Settings, SettingsError, SiteSettings, load_settings
from tests.faults.payloads import PLANTED, PLANTED_EMAIL, PLANTED_TOKEN, referrer_with_secrets, url_with_secrets

SITE = "a.example"
CHROME = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"
)


def record(url: str, referrer: str | None = None) -> EventRecord:
    beacon = msgspec.convert(
        {"id": "0b9f7f2e-8f2a-4c1e-9a53-6f0b3c1d2e4f", "s": SITE, "u": url, "r": referrer, "te": 1000, "ts": 1500},
        Beacon,
    )
    return event_record(beacon, Client("198.18.0.1", CHROME, b"salt"), 2000)


@pytest.mark.parametrize(
    ("url", "stored"),
    [
        ("https://a.example/reset?token=abc123&email=ann%40b.example", "https://a.example/reset"),
        (
            "https://a.example/p?utm_source=news&sid=9&utm_medium=email",
            "https://a.example/p?utm_source=news&utm_medium=email",
        ),
        ("https://a.example/p?gclid=G1&q=private+terms", "https://a.example/p?gclid=G1"),
        ("https://ann:s3cret@A.Example:8443/p?x=1", "https://a.example:8443/p"),
        ("https://a.example/p?utm%5Fsource=encoded%20name", "https://a.example/p?utm%5Fsource=encoded%20name"),
        ("https://a.example/p?email=ann@b.example&utm_campaign=fall#top", "https://a.example/p?utm_campaign=fall"),
        ("https://a.example/p?", "https://a.example/p"),
    ],
)
def test_a_page_url_keeps_only_the_tracked_query_parameters_and_no_userinfo(url: str, stored: str) -> None:
    assert normalise_url(url).url == stored


def test_a_site_may_allow_query_parameters_of_its_own() -> None:
    url = "https://a.example/search?page=2&lang=de&session=xyz&utm_source=news"
    assert normalise_url(url, query_params=("page", "lang")).url == (
        "https://a.example/search?page=2&lang=de&utm_source=news"
    )
    assert normalise_url(url).url == "https://a.example/search?utm_source=news"
    assert allowed_query("page=2&page=3&pagex=1", ("page",)) == "page=2&page=3"


def test_a_hash_routed_page_keeps_its_route_but_not_the_fragments_parameters() -> None:
    assert normalise_url("https://a.example/#/app/2?token=abc", hash_routing=True).url == "https://a.example/#/app/2"
    oauth = normalise_url("https://a.example/cb#access_token=abc&state=s", hash_routing=True)
    assert (oauth.url, oauth.path) == ("https://a.example/cb", "/cb")


@pytest.mark.parametrize(
    ("referrer", "stored"),
    [
        ("https://www.google.com/search?q=my+illness&client=firefox", "https://www.google.com/search"),
        ("https://ann:pw@Mail.Example/inbox?to=ann%40b.example#msg-7", "https://mail.example/inbox"),
        ("https://news.example", "https://news.example"),
        ("android-app://com.google.android.gm/", "android-app://com.google.android.gm/"),
        ("data:text/html,secret", None),
        ("about:blank", None),
        ("http://[::1", None),  # cannot be split: kept as no referrer, not an error
    ],
)
def test_a_referrer_is_stored_as_its_origin_and_path(referrer: str, stored: str | None) -> None:
    assert stored_referrer(referrer) == stored


def test_planted_secrets_leave_no_trace_in_the_stored_event() -> None:
    event = record(url_with_secrets(SITE, "/signup"), referrer_with_secrets())
    text = json.dumps(event.fields())
    assert not [s for s in PLANTED if s in text or s.replace("@", "%40") in text], text
    assert (event.url, event.referrer) == (f"https://{SITE}/signup?utm_source=load", "https://webmail.example/read")


def test_the_stored_fields_are_those_of_the_same_visit_without_the_secrets() -> None:
    """Source, channel, utm_* and every other figure are worked out as before; only the stored strings are cut."""
    secret = record(
        f"https://ann:{PLANTED_TOKEN}@{SITE}/p?utm_source=news&utm_medium=cpc&gclid=G&token={PLANTED_TOKEN}",
        f"https://www.google.co.uk/search?q={PLANTED_EMAIL}&client=firefox",
    )
    clean = record(f"https://{SITE}/p?utm_source=news&utm_medium=cpc&gclid=G", "https://www.google.co.uk/search")
    assert secret.fields() == clean.fields()
    assert (secret.source, secret.medium, secret.channel, secret.click_id) == ("news", "cpc", "Paid", "G")


def test_the_channel_comes_from_the_full_referrer_and_the_stored_one_is_cut() -> None:
    event = record(f"https://{SITE}/p", "https://ann:pw@mail.google.com/mail/u/0/?ui=2#inbox/FMfcgz")
    assert (event.source, event.channel, event.referrer) == ("Gmail", "Email", "https://mail.google.com/mail/u/0/")


def test_a_url_that_cannot_be_split_is_refused_and_a_referrer_that_cannot_is_ignored() -> None:
    with pytest.raises(EnrichError, match="not a valid URL"):
        normalise_url("http://[::1/p")
    event = enrich(
        msgspec.convert(
            {
                "id": "0b9f7f2e-8f2a-4c1e-9a53-6f0b3c1d2e4f",
                "s": SITE,
                "u": f"https://{SITE}/",
                "r": "http://[x",
                "te": 1,
                "ts": 1,
            },
            Beacon,
        ),
        RequestFacts("198.18.0.1", CHROME, 2),
        salt=b"s",
    )
    assert (event.referrer, event.channel) == (None, "Direct")


def test_query_params_are_read_from_the_site_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TALLY_ENV", raising=False)
    (tmp_path / "tally.yaml").write_text("sites:\n  - site_id: a.example\n    query_params: [page, lang]\n")
    assert load_settings(tmp_path).sites[0].query_params == ("page", "lang")
    assert SiteSettings("b.example").query_params == ()


@pytest.mark.parametrize("name", ["", "page=2", "a&b", "has space"])
def test_a_query_param_that_is_not_a_name_is_refused_with_the_site_named(name: str) -> None:
    with pytest.raises(SettingsError, match=r"sites \(a.example\).query_params"):
        SiteSettings("a.example", query_params=(name,))


def test_ingest_keeps_the_query_parameters_the_site_allows(tmp_path: Path) -> None:
    settings = Settings(home=str(tmp_path), sites=(SiteSettings(SITE, domains=(SITE,), query_params=("page",)),))
    records: list[bytes] = []

    class Store:
        async def append(self, batch: list[Record]) -> str:
            records.extend(value for topic, _, value in batch if topic == settings.kafka.pageviews_topic)
            return "kafka"

    pipeline = Pipeline(settings, Store(), RateLimiter(site_events_per_second=1000))
    body = {
        "id": "0b9f7f2e-8f2a-4c1e-9a53-6f0b3c1d2e4f",
        "s": SITE,
        "u": f"https://{SITE}/s?page=2&t=x",
        "te": 1,
        "ts": 1,
    }
    parsed = parse_beacons(json.dumps(body).encode(), max_batch=1)
    assert isinstance(parsed, ParsedBody)
    asyncio.run(pipeline.accept(parsed, RequestFacts("198.18.0.1", CHROME, 2)))
    assert [json.loads(r)["url"] for r in records] == [f"https://{SITE}/s?page=2"]


def test_a_percent_encoded_parameter_fragment_is_no_route() -> None:
    assert normalise_url("https://a.example/app#token%3Dabc", hash_routing=True).url == "https://a.example/app"
    assert normalise_url("https://a.example/app#/orders/2", hash_routing=True).url == "https://a.example/app#/orders/2"


def test_a_referrer_that_is_no_web_or_app_page_is_not_stored() -> None:
    assert stored_referrer("javascript://a.example/%0aalert(1)") is None
    assert stored_referrer("android-app://com.google.android.gm/") == "android-app://com.google.android.gm/"
