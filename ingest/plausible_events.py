"""Plausible's Events API body on ``POST /api/event``: read it, and map it to Tally's beacon.

Reading and mapping are pure (no I/O); :meth:`PlausibleEvents.accept` hands the result to the
pipeline. Plausible's script and its npm package (``@plausible-analytics/tracker``) send
``{"n", "u", "d", "r", "p", "i", "$", "h", "v"}``; its documented API takes the long names
(``name``, ``url``, ``domain``, ``referrer``, ``props``, ``interactive``, ``revenue``,
``hashMode``). The engagement event adds ``sd`` (scroll depth, %, kept as ``scroll_depth``) and
``e`` (engaged time, ms).
Each accepted event becomes a :class:`ingest.beacon.Beacon`, checked by the same rules as
Tally's own, so enrichment, URL privacy, site checks, rate limits and dead letters are the
pipeline's as for any beacon. What is not kept, and why: docs/EVENTS-API.md.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from prometheus_client import Counter
from pydantic import ValidationError

from ingest.beacon import (
    MAX_PROPS,
    MAX_TEXT,
    NOT_UNICODE,
    WIRE_NAMES,
    BeaconSchema,
    ParsedBody,
    Rejection,
    check_props,
    undecodable_text,
)
from ingest.enrich import RequestFacts
from ingest.pipeline import Outcome, Pipeline
from ingest.urls import split_url
from tally.settings import SiteSettings
from tally.site_registry import SiteRegistry
from tally.vitals import SCROLL_DEPTH_KEY, SCROLL_DEPTH_MAX

# Tally's own body always has these (beacon.py); a Plausible body never does.
TALLY_REQUIRED_KEYS = frozenset({"id", "s", "te", "ts"})
MAX_DOMAINS = 10  # "a.example,b.example" records one event per site (Plausible's roll-ups); bounded
MAX_ENGAGEMENT_MS = 86_400_000  # Tally's bound on engagement_ms (beacon.py): one day on one page
PLAUSIBLE_MAX_ENGAGEMENT_MS = 30 * MAX_ENGAGEMENT_MS  # Plausible ignores longer times as a bug of old scripts
ENGAGEMENT = "engagement"
WHOLE_NUMBER = re.compile(r"[+-]?[0-9]+")

SKIPPED = Counter(
    "tally_ingest_plausible_skipped_total",
    "Plausible engagement events answered 202 but not stored (no engaged time nor scroll depth Tally can keep)",
    ["reason"],
)


@dataclass(frozen=True)
class Skipped:
    """A Plausible event that is answered as a success but not stored; ``reason`` is from a closed set:
    ``engagement_without_time`` (0 ms and no valid scroll depth) and ``engagement_over_a_day`` (likewise
    without a scroll depth)."""

    reason: str
    message: str


def plausible_event(body: bytes) -> dict[str, Any] | None:
    """The body as a Plausible event object, or None when it is not one (Tally's parser then answers).

    A Plausible body is one JSON object with none of Tally's required keys (``id``, ``s``,
    ``te``, ``ts``) and with a domain (``d``/``domain``) or the long form's ``name`` and ``url``.
    Decoded with ``json``: unlike msgspec it keeps lone surrogates, which the checks then name.
    """
    try:
        decoded = json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None  # Tally's parser says what is wrong with the JSON
    if not isinstance(decoded, dict) or not TALLY_REQUIRED_KEYS.isdisjoint(decoded):
        return None
    if "d" in decoded or "domain" in decoded or ("name" in decoded and "url" in decoded):
        return decoded
    return None


def first_given(event: dict[str, Any], *keys: str) -> tuple[str, Any]:
    """The first of ``keys`` whose value is neither null nor false, as Plausible reads ``n || name``;
    ``(keys[0], None)`` when there is none."""
    for key in keys:
        value = event.get(key)
        if value is not None and value is not False:
            return key, value
    return keys[0], None


def bare_domain(domain: str) -> str:
    """A domain as sites are matched on it: trimmed, lower case, without ``www.`` (as Plausible does)."""
    return domain.strip().lower().removeprefix("www.")


def domain_index(sites: Sequence[SiteSettings]) -> dict[str, str]:
    """Bare domain -> site_id: every site's id first, then its ``domains``; the first site listed wins."""
    index = {bare_domain(site.site_id): site.site_id for site in sites}
    for site in sites:
        for domain in site.domains:
            index.setdefault(bare_domain(domain), site.site_id)
    return index


def whole_number(value: Any) -> int | None:
    """An integer, or a string of one (Plausible reads ``"sd": "40"`` too); None for anything else,
    a string of more digits than Python converts (4,300) included."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and WHOLE_NUMBER.fullmatch(value):
        try:
            return int(value)
        except ValueError:  # past sys.get_int_max_str_digits(): not a number anyone measured
            return None
    return None


def refusal(field: str, error: str, kind: str = "invalid_event", status: int = 422) -> Rejection:
    """A whole-body refusal naming one field of the Plausible body."""
    return Rejection(status, kind, f"{field}: {error}", ({"field": field, "error": error},))


def read_props(event: dict[str, Any]) -> tuple[str, dict[str, Any]] | Rejection:
    """Properties, filtered as Plausible filters them (null, blank, list and object values are
    dropped), then bounded as Tally bounds its own (at most 20; names 1-64, values ≤ 256 characters)."""
    key, raw = first_given(event, "m", "meta", "p", "props")
    if isinstance(raw, str):  # the API's older form: the properties as a JSON string
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError):
            return refusal(key, "must be an object of properties, or a string of one in JSON")
    if raw is None:
        return key, {}
    if not isinstance(raw, dict):
        return refusal(key, 'must be an object of properties, e.g. {"plan": "pro"}')
    fault = undecodable_text(raw, key)  # the string form is decoded only here: its text is checked here too
    if fault is not None:
        return refusal(fault, NOT_UNICODE)
    props = {
        name: value
        for name, value in raw.items()
        if name.strip() and value is not None and not isinstance(value, list | dict) and str(value).strip()
    }
    if len(props) > MAX_PROPS:
        return refusal(key, f"at most {MAX_PROPS} properties, got {len(props)}")
    try:
        check_props(props)
    except ValueError as e:
        return refusal(key, str(e))
    return key, props


@dataclass(frozen=True)
class Engagement:
    """What an engagement event keeps: engaged time (ms) and scroll depth (%); at least one is set."""

    engagement_ms: int | None
    scroll_depth: int | None

    def beacon_keys(self) -> dict[str, int]:
        """The keys of Tally's engagement beacon these make (``e``, ``sd``), without the missing ones."""
        keys = {"e": self.engagement_ms, SCROLL_DEPTH_KEY: self.scroll_depth}
        return {key: value for key, value in keys.items() if value is not None}


def read_scroll_depth(value: Any) -> int | None:
    """``sd`` as Plausible reads it: an integer (or a string of one) from 0, over 100 taken as 100
    (a page that grew while it was read); None for a negative number or anything else."""
    scroll = whole_number(value)
    if scroll is None or scroll < 0:
        return None
    return min(scroll, SCROLL_DEPTH_MAX)


def read_engagement(event: dict[str, Any]) -> Engagement | Rejection | Skipped:
    """Engaged time and scroll depth of an engagement event, read as Plausible reads ``e`` and ``sd``.

    Refused, as Plausible refuses it, when neither is a valid integer. The engaged time is kept
    from 1 ms to a day (Tally's bound); an event with neither that nor a scroll depth is skipped.
    """
    scroll = read_scroll_depth(event.get(SCROLL_DEPTH_KEY))
    engaged = whole_number(event.get("e"))
    if engaged is None or not 0 <= engaged < PLAUSIBLE_MAX_ENGAGEMENT_MS:
        engaged = None
    if engaged is None and scroll is None:
        return refusal("e", "engagement event requires a valid integer value for at least one of 'sd' or 'e' fields")
    kept = engaged if engaged and engaged <= MAX_ENGAGEMENT_MS else None
    if kept is None and scroll is None:
        if engaged:
            return Skipped("engagement_over_a_day", f"engaged time over {MAX_ENGAGEMENT_MS} ms: not recorded")
        return Skipped("engagement_without_time", "no engaged time and no scroll depth: not recorded")
    return Engagement(kept, scroll)


def validation_refusal(error: ValidationError, names: dict[str, str]) -> Rejection:
    """Field errors of the Tally beacon, named by the Plausible keys they came from."""
    errors = []
    for item in error.errors(include_url=False):
        wire = str(item["loc"][0]) if item["loc"] else ""
        label = f"{names.get(wire, wire)} ({WIRE_NAMES.get(wire, wire)})"
        errors.append({"field": label, "error": item["msg"]})
    return Rejection(422, "invalid_event", "one or more fields are invalid", tuple(errors))


class PlausibleEvents:
    """Plausible bodies for the current sites: the domain index is built again only when they change."""

    def __init__(self, *, sites: SiteRegistry) -> None:
        self._sites = sites
        self._generation = sites.generation
        self._index = domain_index(sites.sites())

    @property
    def _site_of_domain(self) -> dict[str, str]:
        """Bare domain -> site_id of the sites configured now (tally site add/remove included)."""
        if self._generation != self._sites.generation:
            self._generation = self._sites.generation
            self._index = domain_index(self._sites.sites())
        return self._index

    def _domains(self, event: dict[str, Any], url: str) -> list[str] | Rejection:
        key, raw = first_given(event, "d", "domain")
        if raw is None:  # Plausible then takes the page's host
            parts = split_url(url)
            raw = parts.hostname if parts and parts.hostname else ""
        elif not isinstance(raw, str):
            return refusal(key, "must be a string: the site's domain, as configured in sites: in conf/")
        domains = list(dict.fromkeys(d for d in (bare_domain(part) for part in raw.split(",")) if d))
        if not domains:
            return refusal(key, "can't be blank: send the site's domain, as configured in sites: in conf/")
        if len(domains) > MAX_DOMAINS:
            return refusal(key, f"at most {MAX_DOMAINS} comma-separated domains, got {len(domains)}")
        return domains

    def _unknown(self, domain: str) -> Rejection:
        return Rejection(
            403,
            "unknown_site",
            f"domain {domain[:253]!r} is not a configured site; add it with `tally site add` or under sites: "
            "in conf/ (as a site_id, or to a site's domains)",
        )

    def read(self, event: dict[str, Any], *, received_at: int) -> ParsedBody | Rejection | Skipped:
        """The event as one beacon per site its domain names, or why it is refused or skipped.

        Each beacon gets a new random ``event_id``: Plausible's body has none, and an id made from
        its content would merge two real views of one page in the same second. Its time is the
        arrival time (Plausible's body carries no device clock).
        """
        fault = undecodable_text(event)
        if fault is not None:
            return refusal(fault, NOT_UNICODE)
        name_key, name = first_given(event, "n", "name")
        if isinstance(name, int) and not isinstance(name, bool):
            name = str(name)  # as Plausible does: numeric names, e.g. 404 tracking
        if not isinstance(name, str) or not name:
            return refusal(name_key, "is required, a non-empty string: 'pageview', 'engagement' or an event's name")
        url_key, url = first_given(event, "u", "url")
        if not isinstance(url, str) or not url:
            return refusal(url_key, "is required, a string: the page's absolute http(s) URL")
        # Checked once as Tally's beacon with a stand-in site; each site's copy gets its own id below.
        item: dict[str, Any] = {"id": str(uuid.uuid4()), "s": "-", "u": url, "te": received_at, "ts": received_at}
        names = {"n": name_key, "u": url_key}
        if name == ENGAGEMENT:
            engagement = read_engagement(event)
            if not isinstance(engagement, Engagement):
                return engagement
            item |= {"k": ENGAGEMENT, **engagement.beacon_keys()}
            names |= {"e": "e", SCROLL_DEPTH_KEY: SCROLL_DEPTH_KEY}
        else:
            props = read_props(event)
            if isinstance(props, Rejection):
                return props
            names["p"], item["p"] = props
            item |= {"k": "pageview"} if name == "pageview" else {"k": "event", "n": name}
        referrer_key, referrer = first_given(event, "r", "referrer")
        if isinstance(referrer, str) and referrer:  # Plausible ignores a referrer that is no string
            names["r"], item["r"] = referrer_key, referrer[:MAX_TEXT]
        domains = self._domains(event, url)
        if isinstance(domains, Rejection):
            return domains
        try:
            template = BeaconSchema.model_validate(item).beacon()
        except ValidationError as e:
            return validation_refusal(e, names)
        sites = list(dict.fromkeys(self._site_of_domain[d] for d in domains if d in self._site_of_domain))
        unknown = [d for d in domains if d not in self._site_of_domain]
        if not sites:
            return self._unknown(unknown[0])
        # One event per site, each with its own id (the dedup key downstream).
        beacons = [msgspec.structs.replace(template, s=site_id, id=str(uuid.uuid4())) for site_id in sites]
        invalid = [(event, self._unknown(domain)) for domain in unknown]
        return ParsedBody(beacons, invalid, False)

    async def accept(self, event: dict[str, Any], body: bytes, pipeline: Pipeline, facts: RequestFacts) -> Outcome:
        """Answer one Plausible event: through the pipeline as Tally's beacons, refused (a dead
        letter, as any refusal) or skipped (202, counted)."""
        read = self.read(event, received_at=facts.ts_received)
        if isinstance(read, Rejection):
            return await pipeline.refuse(read, body, facts.ts_received, facts.client_ip)
        if isinstance(read, Skipped):
            SKIPPED.labels(reason=read.reason).inc()
            return Outcome(202, {"accepted": 0, "skipped": read.reason, "message": read.message})
        return await pipeline.accept(read, facts)
