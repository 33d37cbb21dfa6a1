"""Enrichment rules: beacon + request facts -> PageViewEvent. Pure: no network, no Kafka.

Each rule is a small function so it can be unit-tested on its own.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import parse_qs, urlsplit, urlunsplit

from ua_parser import parse as parse_user_agent

from ingest.beacon import Beacon, neutralise_formula
from ingest.event_record import EventRecord
from ingest.geo import country_of
from tally.schema import SCHEMA_VERSION, PageViewEvent

SEARCH_ENGINES = {
    "google": "Google",
    "bing": "Bing",
    "duckduckgo": "DuckDuckGo",
    "yahoo": "Yahoo",
    "yandex": "Yandex",
    "baidu": "Baidu",
    "ecosia": "Ecosia",
    "qwant": "Qwant",
}
SOCIAL_NETWORKS = {
    "facebook": "Facebook",
    "t.co": "Twitter",
    "twitter": "Twitter",
    "x.com": "Twitter",
    "linkedin": "LinkedIn",
    "reddit": "Reddit",
    "instagram": "Instagram",
    "youtube": "YouTube",
    "news.ycombinator": "Hacker News",
    "mastodon": "Mastodon",
}
CLICK_ID_PARAMS = ("gclid", "fbclid", "msclkid", "ttclid", "twclid", "li_fat_id")
BOT_MARKERS = (
    "bot",
    "crawl",
    "spider",
    "slurp",
    "headless",
    "lighthouse",
    "phantomjs",
    "python-requests",
    "curl/",
    "wget/",
    "httpclient",
    "scrapy",
)


class EnrichError(ValueError):
    """The beacon is well-formed but its content cannot be accepted (e.g. a non-http URL)."""


@dataclass(frozen=True)
class RequestFacts:
    """What ingest knows about the HTTP request, beyond the beacon. The IP never leaves ingest."""

    client_ip: str
    user_agent: str
    ts_received: int


@dataclass(frozen=True)
class PageUrl:
    url: str
    hostname: str
    path: str
    query: dict[str, str]


@lru_cache(maxsize=16384)  # pages repeat: most beacons of a site share few URLs
def normalise_url(url: str, *, hash_routing: bool = False) -> PageUrl:
    """Keep http(s) URLs only; drop the fragment unless the site routes by hash.

    The result is cached and shared: callers must not modify ``query``.
    """
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EnrichError(f"url must be an absolute http(s) URL, got scheme {parts.scheme!r}")
    fragment = parts.fragment if hash_routing else ""
    path = (parts.path or "/") + (f"#{fragment}" if fragment else "")
    query = {k: v[0] for k, v in parse_qs(parts.query).items() if v}
    clean = urlunsplit((parts.scheme, parts.netloc.lower(), parts.path or "/", parts.query, fragment))
    return PageUrl(clean, parts.hostname.lower(), neutralise_formula(path), query)


def skew_corrected_time(ts_event: int, ts_sent: int, ts_received: int) -> int:
    """Device clocks are wrong; their offset is not: event_time = ts_event + (received - sent)."""
    return ts_event + (ts_received - ts_sent)


def visitor_id(salt: bytes, site_id: str, client_ip: str, user_agent: str) -> str:
    """Keyed hash of (salt, site, IP, user agent): stable within one salt period, unlinkable across."""
    message = "\x1f".join((site_id, client_ip, user_agent)).encode()
    return hmac.digest(salt, message, "sha256").hex()[:32]


def client_hash(salt: bytes, client_ip: str) -> str:
    """Keyed hash of the IP alone: what rate limits count and block, never the IP itself."""
    return hmac.digest(salt, b"client\x1f" + client_ip.encode(), "sha256").hex()[:32]


@dataclass(frozen=True)
class Agent:
    browser: str
    os: str
    device: str
    is_bot: bool


@lru_cache(maxsize=8192)
def parse_agent(user_agent: str) -> Agent:
    """Browser, OS, device class and bot flag from a user agent (cached: few distinct UAs)."""
    lowered = user_agent.lower()
    is_bot = not user_agent or any(marker in lowered for marker in BOT_MARKERS)
    parsed = parse_user_agent(user_agent[:1000])
    browser = parsed.user_agent.family if parsed.user_agent else "Other"
    os_family = parsed.os.family if parsed.os else "Other"
    device_family = parsed.device.family if parsed.device else "Other"
    if device_family == "Spider":
        is_bot = True
    if "ipad" in lowered or "tablet" in lowered:
        device = "tablet"
    elif "mobi" in lowered or "iphone" in lowered or "android" in lowered:
        device = "mobile"
    else:
        device = "desktop"
    return Agent(browser, os_family, device, is_bot)


@dataclass(frozen=True)
class Acquisition:
    source: str | None
    medium: str | None
    channel: str
    campaign: str | None


def classify_referrer(referrer: str | None, page_host: str, query: dict[str, str]) -> Acquisition:
    """Referrer and utm_* -> source / medium / channel, in the spirit of GA4's default channels."""
    utm_source, utm_medium = query.get("utm_source"), query.get("utm_medium")
    campaign = query.get("utm_campaign")
    has_click_id = any(p in query for p in CLICK_ID_PARAMS)
    ref_host = (urlsplit(referrer).hostname or "").lower() if referrer else ""
    if ref_host.startswith("www."):
        ref_host = ref_host[4:]
    if ref_host == page_host.removeprefix("www."):
        ref_host = ""  # internal navigation is not a source
    known = _known_name(ref_host, SEARCH_ENGINES) or _known_name(ref_host, SOCIAL_NETWORKS)
    source = utm_source or known or ref_host or None
    medium = utm_medium.lower() if utm_medium else None
    if medium in ("cpc", "ppc", "paid", "paidsearch") or has_click_id:
        channel = "Paid"
    elif medium == "email":
        channel = "Email"
    elif _known_name(ref_host, SEARCH_ENGINES):
        channel, medium = "Organic Search", medium or "organic"
    elif _known_name(ref_host, SOCIAL_NETWORKS) or medium == "social":
        channel, medium = "Social", medium or "social"
    elif source:
        channel, medium = "Referral", medium or "referral"
    else:
        channel = "Direct"
    return Acquisition(source and neutralise_formula(source), medium, channel, campaign)


def _known_name(host: str, table: dict[str, str]) -> str | None:
    """``www.google.co.uk`` -> "Google": a table entry matching a label, or a dotted prefix."""
    if not host:
        return None
    labels = host.split(".")
    for marker, name in table.items():
        if marker in labels or host == marker or host.startswith(marker + "."):
            return name
    return None


class Client:
    """The sender of requests: UA, country and hashes worked out once for all its events.

    Shared by its requests (see :func:`client_of`); the IP goes no further.
    """

    __slots__ = ("_ip", "_salt", "_user_agent", "_visitor_ids", "agent", "client_hash", "country")

    def __init__(self, client_ip: str, user_agent: str, salt: bytes) -> None:
        self._ip, self._user_agent, self._salt = client_ip, user_agent, salt
        self.agent = parse_agent(user_agent)
        self.country = country_of(client_ip)
        self.client_hash = client_hash(salt, client_ip)
        self._visitor_ids: dict[str, str] = {}

    def visitor_id(self, site_id: str) -> str:
        """The client's visitor id on one site (a client's events are nearly always of one site)."""
        found = self._visitor_ids.get(site_id)
        if found is None:
            found = visitor_id(self._salt, site_id, self._ip, self._user_agent)
            self._visitor_ids[site_id] = found
        return found


@lru_cache(maxsize=4096)  # a visitor sends several beacons: page views, engagement, events
def client_of(client_ip: str, user_agent: str, salt: bytes) -> Client:
    """The :class:`Client` for this IP and user agent under today's salt."""
    return Client(client_ip, user_agent, salt)


@dataclass(frozen=True)
class Page:
    """Everything an event's page URL and referrer say, worked out once per distinct pair."""

    url: PageUrl
    acquisition: Acquisition
    utm: tuple[str | None, ...]  # utm_source, utm_medium, utm_campaign, utm_term, utm_content
    click_id: str | None


@lru_cache(maxsize=16384)
def page_of(url: str, referrer: str | None, hash_routing: bool) -> Page:
    """URL, referrer and utm_* -> :class:`Page` (cached: a site's events share few pages and referrers)."""
    page = normalise_url(url, hash_routing=hash_routing)
    query = page.query
    utm = tuple(query.get(f"utm_{part}") for part in ("source", "medium", "campaign", "term", "content"))
    click_id = next((query[p] for p in CLICK_ID_PARAMS if p in query), None)
    return Page(page, classify_referrer(referrer, page.hostname, query), utm, click_id)


def event_record(beacon: Beacon, client: Client, ts_received: int, *, hash_routing: bool = False) -> EventRecord:
    """The stored event, from a validated beacon, the client that sent it and when it arrived."""
    referrer = beacon.r or None
    page = page_of(beacon.u, referrer, hash_routing)
    url, acquisition, agent, utm = page.url, page.acquisition, client.agent, page.utm
    return EventRecord(  # positional, in schema order: several times cheaper than keywords
        beacon.id.lower(),  # event_id
        beacon.k,  # type
        beacon.n,  # name
        beacon.s,  # site_id
        url.url,  # url
        url.hostname,  # hostname
        url.path,  # path
        referrer,  # referrer
        beacon.ti,  # title
        beacon.te,  # ts_event
        beacon.ts,  # ts_sent
        ts_received,  # ts_received
        skew_corrected_time(beacon.te, beacon.ts, ts_received),  # event_time
        beacon.w,  # screen_w
        beacon.l,  # language
        beacon.z,  # tz
        beacon.props_as_text() if beacon.p else {},  # props
        beacon.e,  # engagement_ms
        beacon.ld,  # load_ms
        client.visitor_id(beacon.s),  # visitor_id
        client.client_hash,  # client_hash
        agent.browser,  # browser
        agent.os,  # os
        agent.device,  # device
        agent.is_bot,  # is_bot
        client.country,  # country
        acquisition.source,  # source
        acquisition.medium,  # medium
        acquisition.channel,  # channel
        acquisition.campaign,  # campaign
        utm[0],  # utm_source
        utm[1],  # utm_medium
        utm[2],  # utm_campaign
        utm[3],  # utm_term
        utm[4],  # utm_content
        page.click_id,  # click_id
        SCHEMA_VERSION,  # schema_version
    )


def enrich(beacon: Beacon, facts: RequestFacts, *, salt: bytes, hash_routing: bool = False) -> PageViewEvent:
    """Build the stored event from a validated beacon and the request it came with."""
    client = Client(facts.client_ip, facts.user_agent, salt)
    return event_record(beacon, client, facts.ts_received, hash_routing=hash_routing).event()
