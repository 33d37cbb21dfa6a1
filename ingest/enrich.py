"""Enrichment rules: beacon + request facts -> PageViewEvent. Pure: no network, no Kafka.

Each rule is a small function so it can be unit-tested on its own. What is kept of the page URL
and referrer is in ``ingest.urls``; user agents are read in ``ingest.user_agents``; known
referrers come from ``ingest.referrers``.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from functools import lru_cache

from ingest.beacon import Beacon, neutralise_formula
from ingest.event_record import EventRecord
from ingest.geo import location_of
from ingest.referrers import known_referrer
from ingest.urls import (
    CLICK_ID_PARAMS,
    UTM_PARAMS,
    EnrichError,
    PageUrl,
    normalise_url,
    split_url,
    stored_referrer,
)
from ingest.user_agents import Agent, parse_agent
from tally.schema import SCHEMA_VERSION, PageViewEvent

__all__ = [
    "Acquisition",
    "Agent",
    "Client",
    "EnrichError",
    "Page",
    "PageUrl",
    "RequestFacts",
    "classify_referrer",
    "client_hash",
    "client_of",
    "enrich",
    "event_record",
    "normalise_url",
    "page_of",
    "parse_agent",
    "skew_corrected_time",
    "visitor_id",
]

PAID_MEDIA = ("cpc", "ppc", "paid", "paidsearch")


@dataclass(frozen=True)
class RequestFacts:
    """What ingest knows about the HTTP request, beyond the beacon. The IP never leaves ingest."""

    client_ip: str
    user_agent: str
    ts_received: int
    opted_out: bool = False  # the request carried DNT: 1 or Sec-GPC: 1


def opt_out_signalled(dnt: str, gpc: str) -> bool:
    """Whether a request's ``DNT`` or ``Sec-GPC`` header asks not to be tracked (both send "1")."""
    return dnt.strip() == "1" or gpc.strip() == "1"


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
class Acquisition:
    source: str | None
    medium: str | None
    channel: str
    campaign: str | None


def classify_referrer(referrer: str | None, page_host: str, query: dict[str, str]) -> Acquisition:
    """Referrer and utm_* -> source / medium / channel, in the spirit of GA4's default channels.

    Reads the full referrer (host and path): run it before the referrer is cut to what is stored.
    A referrer's source and medium come from the referrer database (``ingest.referrers``).
    """
    utm_source, utm_medium = query.get("utm_source"), query.get("utm_medium")
    campaign = query.get("utm_campaign")
    has_click_id = any(p in query for p in CLICK_ID_PARAMS)
    parts = split_url(referrer) if referrer else None
    ref_host = (parts.hostname or "") if parts else ""  # urlsplit gives it in lower case
    if ref_host.removeprefix("www.") == page_host.removeprefix("www."):
        ref_host = ""  # internal navigation is not a source
    known = known_referrer(ref_host, parts.path if parts else "") if ref_host else None
    kind = known.medium if known else None
    source = utm_source or (known.source if known else None) or ref_host.removeprefix("www.") or None
    medium = utm_medium.lower() if utm_medium else None
    if medium in PAID_MEDIA or has_click_id:
        channel = "Paid"
    elif medium == "email" or kind == "email":
        channel, medium = "Email", medium or "email"
    elif kind == "search":
        channel, medium = "Organic Search", medium or "organic"
    elif kind == "social" or medium == "social":
        channel, medium = "Social", medium or "social"
    elif kind == "paid":
        channel, medium = "Paid", medium or "paid"
    elif source:  # chatbots and sources of no known medium too
        channel, medium = "Referral", medium or "referral"
    else:
        channel = "Direct"
    return Acquisition(source and neutralise_formula(source), medium, channel, campaign)


class Client:
    """The sender of requests: UA, location and hashes worked out once for all its events.

    Shared by its requests (see :func:`client_of`); the IP goes no further.
    """

    __slots__ = ("_ip", "_salt", "_user_agent", "_visitor_ids", "agent", "city", "client_hash", "country", "region")

    def __init__(self, client_ip: str, user_agent: str, salt: bytes) -> None:
        self._ip, self._user_agent, self._salt = client_ip, user_agent, salt
        self.agent = parse_agent(user_agent)
        location = location_of(client_ip)
        self.country, self.region, self.city = location.country, location.region, location.city
        self.client_hash = client_hash(salt, client_ip)
        self._visitor_ids: dict[str, str] = {}

    def visitor_id(self, site_id: str, salt: bytes | None = None) -> str:
        """The client's visitor id on one site (a client's events are nearly always of one site),
        under the site's period salt (``salt``; None: the day's, the default period)."""
        key = site_id if salt is None else f"{site_id}\x1f{salt.hex()}"
        found = self._visitor_ids.get(key)
        if found is None:
            found = visitor_id(salt or self._salt, site_id, self._ip, self._user_agent)
            self._visitor_ids[key] = found
        return found


@lru_cache(maxsize=4096)  # a visitor sends several beacons: page views, engagement, events
def client_of(client_ip: str, user_agent: str, salt: bytes) -> Client:
    """The :class:`Client` for this IP and user agent under today's salt."""
    return Client(client_ip, user_agent, salt)


@dataclass(frozen=True)
class Page:
    """Everything an event's page URL and referrer say, worked out once per distinct pair."""

    url: PageUrl
    referrer: str | None  # as stored: origin and path
    acquisition: Acquisition
    utm: tuple[str | None, ...]  # utm_source, utm_medium, utm_campaign, utm_term, utm_content
    click_id: str | None


@lru_cache(maxsize=16384)
def page_of(url: str, referrer: str | None, hash_routing: bool, query_params: tuple[str, ...] = ()) -> Page:
    """URL, referrer and utm_* -> :class:`Page` (cached: a site's events share few pages and referrers).

    Source and channel are read from the full referrer; what is stored of it and of the URL is cut.
    """
    page = normalise_url(url, hash_routing=hash_routing, query_params=query_params)
    query = page.query
    utm = tuple(query.get(name) for name in UTM_PARAMS)
    click_id = next((query[p] for p in CLICK_ID_PARAMS if p in query), None)
    acquisition = classify_referrer(referrer, page.hostname, query)
    return Page(page, stored_referrer(referrer), acquisition, utm, click_id)


def event_record(
    beacon: Beacon,
    client: Client,
    ts_received: int,
    *,
    hash_routing: bool = False,
    query_params: tuple[str, ...] = (),
    visitor_salt: bytes | None = None,
) -> EventRecord:
    """The stored event, from a validated beacon, the client that sent it and when it arrived.

    ``hash_routing`` and ``query_params`` are the site's (``SiteSettings``).
    """
    page = page_of(beacon.u, beacon.r or None, hash_routing, query_params)
    url, acquisition, agent, utm = page.url, page.acquisition, client.agent, page.utm
    return EventRecord(  # positional, in schema order: several times cheaper than keywords
        beacon.id.lower(),  # event_id
        beacon.k,  # type
        beacon.n,  # name
        beacon.s,  # site_id
        url.url,  # url
        url.hostname,  # hostname
        url.path,  # path
        page.referrer,  # referrer
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
        beacon.lcp,  # lcp_ms (the beacon's keys are tally.vitals.VITALS' names, the fields their columns)
        beacon.inp,  # inp_ms
        beacon.cls,  # cls: a float, -0.0 made 0.0 (ingest.beacon)
        beacon.fcp,  # fcp_ms
        beacon.ttfb,  # ttfb_ms
        beacon.sd,  # scroll_depth
        client.visitor_id(beacon.s, visitor_salt),  # visitor_id
        client.client_hash,  # client_hash
        agent.browser,  # browser
        agent.os,  # os
        agent.device,  # device
        agent.is_bot,  # is_bot
        client.country,  # country
        client.region,  # region
        client.city,  # city
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


def enrich(
    beacon: Beacon,
    facts: RequestFacts,
    *,
    salt: bytes,
    hash_routing: bool = False,
    query_params: tuple[str, ...] = (),
) -> PageViewEvent:
    """Build the stored event from a validated beacon and the request it came with."""
    client = Client(facts.client_ip, facts.user_agent, salt)
    record = event_record(beacon, client, facts.ts_received, hash_routing=hash_routing, query_params=query_params)
    return record.event()
