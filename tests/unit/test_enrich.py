import json

import msgspec
import pytest

from ingest.beacon import Beacon
from ingest.enrich import (
    Client,
    EnrichError,
    RequestFacts,
    classify_referrer,
    client_hash,
    enrich,
    event_record,
    normalise_url,
    parse_agent,
    skew_corrected_time,
    visitor_id,
)
from ingest.event_record import encode_record
from tally.schema import FIELDS

CHROME = (
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"
)
IPHONE = (
    "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 "
    "(KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1"
)


def test_fragments_are_dropped_unless_the_site_routes_by_hash() -> None:
    assert normalise_url("https://A.com/docs?x=1#top").path == "/docs"
    assert normalise_url("https://a.com/#/app/2", hash_routing=True).path == "/#/app/2"
    assert normalise_url("https://a.com").path == "/"


@pytest.mark.parametrize("url", ["javascript:alert(1)", "data:text/html,hi", "ftp://a.com/x", "/relative", "https://"])
def test_hostile_or_non_http_urls_are_refused(url: str) -> None:
    with pytest.raises(EnrichError):
        normalise_url(url)


def test_clock_skew_is_corrected_by_the_send_to_receive_offset() -> None:
    # The device clock is one hour slow; the event happened 2 s before it was sent.
    device_now = 1_000_000
    assert skew_corrected_time(device_now - 2000, device_now, device_now + 3_600_000) == device_now + 3_598_000


def test_visitor_ids_are_stable_within_a_salt_and_unlinkable_across() -> None:
    a = visitor_id(b"salt-1", "a.com", "198.18.0.1", CHROME)
    assert a == visitor_id(b"salt-1", "a.com", "198.18.0.1", CHROME)
    assert a != visitor_id(b"salt-2", "a.com", "198.18.0.1", CHROME)
    assert a != visitor_id(b"salt-1", "b.com", "198.18.0.1", CHROME)
    assert "198.18.0.1" not in a


@pytest.mark.parametrize(
    "ua, browser, device, bot",
    [
        (CHROME, "Chrome", "desktop", False),
        (IPHONE, "Mobile Safari", "mobile", False),
        ("Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", "Googlebot", "desktop", True),
        ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 HeadlessChrome/120.0.0.0 Safari/537.36", None, None, True),
        ("", None, None, True),
        ("<script>alert(1)</script>" * 100, None, None, True),  # isbot: a user agent starting with <  is no browser
    ],
)
def test_user_agents_are_classified(ua: str, browser: str | None, device: str | None, bot: bool) -> None:
    agent = parse_agent(ua)
    assert agent.is_bot is bot
    if browser:
        assert agent.browser == browser
    if device:
        assert agent.device == device


@pytest.mark.parametrize(
    "referrer, query, source, channel",
    [
        (None, {}, None, "Direct"),
        ("https://www.google.co.uk/", {}, "Google", "Organic Search"),
        ("https://t.co/x", {}, "Twitter", "Social"),
        ("https://blog.example.org/post", {}, "blog.example.org", "Referral"),
        ("https://a.com/other", {}, None, "Direct"),
        (None, {"utm_source": "newsletter", "utm_medium": "email"}, "newsletter", "Email"),
        ("https://www.google.com/", {"gclid": "abc"}, "Google", "Paid"),
        ("https://=evil.example/", {}, "'=evil.example", "Referral"),
    ],
)
def test_referrers_are_classified_into_channels(
    referrer: str | None, query: dict[str, str], source: str | None, channel: str
) -> None:
    acquisition = classify_referrer(referrer, "a.com", query)
    assert (acquisition.source, acquisition.channel) == (source, channel)


def test_enrich_builds_the_stored_event_without_the_ip() -> None:
    beacon = msgspec.convert(
        {
            "id": "0B9F7F2E-8F2A-4C1E-9A53-6F0B3C1D2E4F",
            "s": "a.com",
            "u": "https://a.com/p?utm_campaign=x#frag",
            "te": 1000,
            "ts": 1500,
            "r": "https://duckduckgo.com/",
        },
        Beacon,
    )
    event = enrich(beacon, RequestFacts("203.0.113.9", CHROME, 2000), salt=b"s")
    assert event.event_id == "0b9f7f2e-8f2a-4c1e-9a53-6f0b3c1d2e4f"
    assert (event.path, event.hostname, event.event_time) == ("/p", "a.com", 1500)
    assert (event.utm_campaign, event.channel, event.browser) == ("x", "Organic Search", "Chrome")
    assert b"203.0.113.9" not in event.to_json()


def test_the_event_record_holds_every_field_where_the_schema_has_it_and_encodes_like_the_dataclass() -> None:
    beacon = msgspec.convert(
        {
            "id": "0B9F7F2E-8F2A-4C1E-9A53-6F0B3C1D2E4F",
            "k": "event",
            "n": "signup",
            "s": "a.com",
            "u": "https://a.com/é?utm_source=s&utm_medium=m&utm_campaign=c&utm_term=t&utm_content=x&gclid=g",
            "r": "https://news.example/",
            "ti": "Title",
            "te": 1000,
            "ts": 1500,
            "w": 390,
            "l": "de",
            "z": "Europe/Berlin",
            "p": {"plan": "pro"},
            "e": 7,
            "ld": 8,
        },
        Beacon,
    )
    facts = RequestFacts("81.2.69.142", IPHONE, 2000)
    record = event_record(beacon, Client(facts.client_ip, facts.user_agent, b"s"), facts.ts_received)
    assert record.fields() == {
        "event_id": "0b9f7f2e-8f2a-4c1e-9a53-6f0b3c1d2e4f",
        "type": "event",
        "name": "signup",
        "site_id": "a.com",
        "url": "https://a.com/é?utm_source=s&utm_medium=m&utm_campaign=c&utm_term=t&utm_content=x&gclid=g",
        "hostname": "a.com",
        "path": "/é",
        "referrer": "https://news.example/",
        "title": "Title",
        "ts_event": 1000,
        "ts_sent": 1500,
        "ts_received": 2000,
        "event_time": 1500,
        "screen_w": 390,
        "language": "de",
        "tz": "Europe/Berlin",
        "props": {"plan": "pro"},
        "engagement_ms": 7,
        "load_ms": 8,
        "lcp_ms": None,
        "inp_ms": None,
        "cls": None,
        "fcp_ms": None,
        "ttfb_ms": None,
        "scroll_depth": None,
        "visitor_id": visitor_id(b"s", "a.com", "81.2.69.142", IPHONE),
        "client_hash": client_hash(b"s", "81.2.69.142"),
        "browser": "Mobile Safari",
        "os": "iOS",
        "device": "mobile",
        "is_bot": False,
        "country": "GB",
        "region": None,  # region and city only with geo.city_db (tests/unit/test_geo_city.py)
        "city": None,
        "source": "s",
        "medium": "m",
        "channel": "Paid",
        "campaign": "c",
        "utm_source": "s",
        "utm_medium": "m",
        "utm_campaign": "c",
        "utm_term": "t",
        "utm_content": "x",
        "click_id": "g",
        "schema_version": 1,
    }
    assert list(record.fields()) == list(FIELDS)
    assert json.loads(encode_record(record)) == json.loads(enrich(beacon, facts, salt=b"s").to_json())


def test_a_client_hashes_its_visitor_id_once_per_site() -> None:
    client = Client("203.0.113.9", CHROME, b"salt")
    assert client.visitor_id("a.com") == visitor_id(b"salt", "a.com", "203.0.113.9", CHROME)
    assert client.visitor_id("b.com") == visitor_id(b"salt", "b.com", "203.0.113.9", CHROME)
    assert client.client_hash == client_hash(b"salt", "203.0.113.9")
