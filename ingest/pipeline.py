"""What ingest does with one request: validate -> enrich -> check site -> rate-limit -> store.

Every refusal becomes a dead letter on ``pageviews.rejected`` (with the payload), up to
``ratelimit.client_refusals_per_minute`` per client; past that, refusals are counted, and each
count is stored as one summary dead letter when its minute closes (ingest/PAYLOAD.md). Every
accepted event is acknowledged only once it is durable (an :class:`ingest.types.RecordStore`:
:class:`ingest.durable.DurableLog` in the app, an in-memory fake in unit tests).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass, field
from typing import Any

import msgspec
from prometheus_client import Counter

from ingest.beacon import ParsedBody, Rejection
from ingest.enrich import EnrichError, RequestFacts, client_hash, client_of, event_record
from ingest.event_record import EventRecord, encode_record
from ingest.kept_payload import kept_payload
from ingest.ratelimit import RateLimiter, RefusalLimiter, SuppressedRefusals
from ingest.salts import SaltStore
from ingest.spool import Record, SpoolWriteFailed
from ingest.types import RecordStore
from tally.deadletter import dead_letter
from tally.log import kv
from tally.settings import Settings, SiteSettings
from tally.site_registry import SiteRegistry

log = logging.getLogger("tally.ingest")

EVENTS = Counter(
    "tally_ingest_events_total", "Events by outcome (accepted, opt_out, or the rejection kind)", ["outcome"]
)
STORED = Counter("tally_ingest_stored_total", "Accepted events by where they were made durable", ["store"])
THROTTLED = Counter("tally_ingest_throttled_requests_total", "Requests refused by a rate limit")
SUPPRESSED = Counter(
    "tally_ingest_refusals_suppressed_total",
    "Refusals over ratelimit.client_refusals_per_minute: counted in a summary dead letter, not stored whole",
    ["kind"],
)

UNAVAILABLE_RETRY_AFTER_S = 10  # a full spool disk is an operator's job: ask clients to wait a while
UNAVAILABLE = Rejection(
    503,
    "unavailable",
    "ingest cannot store events right now (Kafka unavailable and its spool failing); retry later",
    retry_after_s=UNAVAILABLE_RETRY_AFTER_S,
)

# A refusal: what to keep as the payload (the body, or one item of it), why, and the site it names.
Refused = tuple[Any, Rejection, str]


class BufferedCounts:
    """Counter increments kept in memory and written to Prometheus together, by :meth:`flush`.

    With several workers, each increment of a prometheus_client counter takes a lock, a getpid
    system call and a write to the worker's mmap file, and the accept path made two a request.
    ingest.app flushes every second (and when a worker stops); refusals (rare, and read at once
    by operators) still count directly.
    """

    def __init__(self) -> None:
        self._pending: dict[Any, float] = {}

    def add(self, counter: Any, amount: float) -> None:
        """Count ``amount`` on ``counter`` (a prometheus_client counter or labelled child) at the next flush."""
        self._pending[counter] = self._pending.get(counter, 0) + amount

    def flush(self) -> None:
        pending, self._pending = self._pending, {}
        for counter, amount in pending.items():
            counter.inc(amount)


@dataclass
class Outcome:
    """The answer to one request: HTTP status and JSON body, plus headers."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


class Pipeline:
    """Per-process ingest state: settings, the current sites, salts, rate limiter and the durable store.

    ``sites``: the sites this worker accepts, the seed of ``sites:`` folded with the sites topic
    (:func:`topics.sites.follow_sites` keeps it current); by default the seed alone.
    """

    def __init__(
        self, settings: Settings, store: RecordStore, limiter: RateLimiter, *, sites: SiteRegistry | None = None
    ) -> None:
        self.settings = settings
        self.sites = sites or SiteRegistry(seed=settings.sites)
        self.store = store
        self.limiter = limiter
        self.salts = SaltStore(settings.home_dir / "salts")
        self.refusals = RefusalLimiter(per_minute=settings.ratelimit.client_refusals_per_minute)
        self._accepted = EVENTS.labels(outcome="accepted")
        self._opted_out = EVENTS.labels(outcome="opt_out")
        self._stored = {where: STORED.labels(store=where) for where in ("kafka", "spool")}
        self.counts = BufferedCounts()

    def _letter(self, rejection: Rejection, payload: bytes, received_at: int) -> Record:
        """One refusal as a dead-letter record; it is stored as durably as an event."""
        letter = dead_letter(
            component="tally-ingest",
            kind=rejection.kind,
            message=rejection.message,
            status=rejection.status,
            received_at=received_at,
            payload=payload,
            errors=list(rejection.errors),
        )
        return (self.settings.kafka.rejected_topic, None, letter.to_json())

    def _site_named(self, item: Any) -> str:
        """The configured site an item names, else "" (refusals are counted per client, site and kind)."""
        site_id = item.get("s") if isinstance(item, dict) else None
        return site_id if isinstance(site_id, str) and self.sites.get(site_id) else ""

    def _dead_letters(self, refused: list[Refused], client_ip: str, received_at: int) -> list[Record]:
        """The dead letters of a request's refusals: each stored whole while its client is within
        ``ratelimit.client_refusals_per_minute``, else counted (see :meth:`store_suppressed`)."""
        records = []
        client = ""
        for item, rejection, site_id in refused:
            EVENTS.labels(outcome=rejection.kind).inc()
            if self.refusals.per_minute:
                client = client or client_hash(self.salts.salt_for(received_at), client_ip)
                kind, status = rejection.kind, rejection.status
                if not self.refusals.admit(
                    client_hash=client, site_id=site_id, kind=kind, status=status, now_ms=received_at
                ):
                    SUPPRESSED.labels(kind=kind).inc()
                    continue
            # Never more of a URL than an accepted event keeps (ingest/kept_payload.py).
            payload = kept_payload(item, self.sites.get(site_id) if site_id else None)
            records.append(self._letter(rejection, payload, received_at))
        return records

    async def refuse(self, rejection: Rejection, payload: bytes, received_at: int, client_ip: str) -> Outcome:
        """Refuse a whole request (its body is the payload): a dead letter, within the client's refusal limit."""
        records = self._dead_letters([(payload, rejection, "")], client_ip, received_at)
        if records and not await self._store(records):
            return unavailable()
        return Outcome(rejection.status, rejection.body())

    async def _store(self, records: list[Record]) -> str:
        """Store records; return where (``"kafka"``/``"spool"``), or "" when they could not be stored."""
        try:
            return await self.store.append(records)
        except SpoolWriteFailed as e:
            EVENTS.labels(outcome="unavailable").inc(len(records))
            log.error("events refused: not stored", extra=kv(records=len(records), error=str(e)))
            return ""

    def _summary(self, counted: SuppressedRefusals) -> Record:
        """The dead letter that stands for refusals counted instead of stored (ingest/PAYLOAD.md)."""
        minute = dt.datetime.fromtimestamp(counted.minute_ms / 1000, tz=dt.UTC).strftime("%Y-%m-%dT%H:%MZ")
        limit = self.refusals.per_minute
        summary = {"suppressed": counted.count, "client_hash": counted.client_hash, "site_id": counted.site_id}
        letter = dead_letter(
            component="tally-ingest",
            kind=counted.kind,
            message=f"suppressed: {counted.count} more {counted.kind} refusals from one client in the minute "
            f"from {minute}, counted, not stored (over ratelimit.client_refusals_per_minute: {limit})",
            status=counted.status,
            received_at=counted.last_at_ms,
            payload=json.dumps(summary | {"minute": minute}).encode(),
        )
        return (self.settings.kafka.rejected_topic, None, letter.to_json())

    async def store_suppressed(self, now_ms: int | None = None) -> int:
        """Store one summary dead letter per count of suppressed refusals whose minute is over
        before ``now_ms`` (every count when None: ingest is stopping); return how many."""
        counted = self.refusals.drain() if now_ms is None else self.refusals.closed(now_ms)
        if not counted:
            return 0
        refusals = sum(c.count for c in counted)
        try:
            await self.store.append([self._summary(c) for c in counted])
        except (SpoolWriteFailed, OSError) as e:  # Kafka down and the spool's disk failing: say what is lost
            log.error("refusal counts not stored", extra=kv(records=len(counted), refusals=refusals, error=str(e)))
            return 0
        log.warning("refusals counted, not stored whole", extra=kv(records=len(counted), refusals=refusals))
        return len(counted)

    def _site_check(self, site_id: str, site: SiteSettings | None, hostname: str) -> Rejection | None:
        if site is None:
            return Rejection(
                403,
                "unknown_site",
                f"site_id {site_id!r} is not configured; add it with `tally site add` (or under sites: in conf/)",
            )
        if site.domains and hostname not in site.domains:
            return Rejection(403, "foreign_host", f"host {hostname!r} does not belong to site {site_id!r}")
        return None

    def _enrich_all(self, parsed: ParsedBody, facts: RequestFacts) -> tuple[list[EventRecord], list[Refused]]:
        events: list[EventRecord] = []
        invalid = [(item, rejection, self._site_named(item)) for item, rejection in parsed.invalid]
        if not parsed.beacons:
            return events, invalid
        # UA, country, client hash and visitor id belong to the client: worked out once for all its events.
        client = client_of(facts.client_ip, facts.user_agent, self.salts.salt_for(facts.ts_received))
        for beacon in parsed.beacons:
            site = self.sites.get(beacon.s)
            try:
                event = event_record(
                    beacon,
                    client,
                    facts.ts_received,
                    hash_routing=bool(site and site.hash_routing),
                    query_params=site.query_params if site else (),
                    # a week's or a month's salt for sites that keep ids that long (tally.salt_periods)
                    visitor_salt=self.salts.salt_for(facts.ts_received, site.salt_period)
                    if site and site.salt_period != "day"
                    else None,
                )
            except EnrichError as e:
                error = {"field": "u (url)", "error": str(e)}
                item = msgspec.structs.asdict(beacon)
                invalid.append((item, Rejection(422, "invalid_url", str(e), (error,)), self._site_named(item)))
                continue
            refusal = self._site_check(beacon.s, site, event.hostname)
            if refusal:
                item = msgspec.structs.asdict(beacon)
                invalid.append((item, refusal, self._site_named(item)))
            else:
                events.append(event)
        return events, invalid

    def _honours_opt_out(self, site_id: str) -> bool:
        site = self.sites.get(site_id)
        return bool(site and site.honour_opt_out)

    def _rate_limit(self, events: list[EventRecord], now_ms: int) -> tuple[list[EventRecord], list[Refused]]:
        """The events within their limits, and the refusals of the rest: each site's events of the
        request are checked against that site's limits for this client (a request may name several)."""
        by_site: dict[str, list[EventRecord]] = {}
        for event in events:
            by_site.setdefault(event.site_id, []).append(event)
        kept: list[EventRecord] = []
        refused: list[Refused] = []
        for site_id, of_site in by_site.items():
            site = self.sites.get(site_id)
            if site is None:  # removed while this request was being checked: the removal counts from the next one
                site = SiteSettings(site_id)
            verdict = self.limiter.check(
                client_hash=of_site[0].client_hash,
                site_id=site_id,
                now_ms=now_ms,
                events=len(of_site),
                pageviews=sum(e.type == "pageview" for e in of_site),
                client_limit_per_hour=self.settings.client_limit(site),
                client_events_per_hour=self.settings.ratelimit.client_events_per_hour,
            )
            if verdict.allowed:
                kept += of_site
                continue
            THROTTLED.inc()
            throttled = Rejection(429, "rate_limited", verdict.reason, retry_after_s=verdict.retry_after_s)
            # The dead letter keeps the event but not who sent it: a refused event is no visit, and
            # `tally forget` does not search raw.rejected for visitor ids.
            refused += [({**e.fields(), "visitor_id": "", "client_hash": ""}, throttled, site_id) for e in of_site]
        return kept, refused

    async def accept(self, parsed: ParsedBody, facts: RequestFacts) -> Outcome:
        """Enrich, check and store the valid beacons of a request; dead-letter the rest."""
        events, invalid = self._enrich_all(parsed, facts)
        opted_out = 0
        if facts.opted_out:
            kept = [e for e in events if not self._honours_opt_out(e.site_id)]
            opted_out, events = len(events) - len(kept), kept
            self.counts.add(self._opted_out, opted_out)
        events, limited = self._rate_limit(events, facts.ts_received)
        throttled = limited[0][1] if limited else None
        invalid += limited
        records = self._dead_letters(invalid, facts.client_ip, facts.ts_received)
        topic = self.settings.kafka.pageviews_topic
        records += [(topic, e.visitor_id.encode(), encode_record(e)) for e in events]
        # One append for the whole request: Kafka acknowledges its events and dead letters together.
        where = ""  # stays "" when every refusal was only counted
        if records:
            where = await self._store(records)
            if not where:  # nothing of the request was stored: the client must send it again
                return unavailable()
        if events:
            self.counts.add(self._accepted, len(events))
            self.counts.add(self._stored[where], len(events))
        if not events and not invalid:  # every event was dropped for the visitor's opt-out
            return Outcome(202, {"accepted": 0, "ignored": opted_out, "reason": "opt-out"})
        if not events:
            # Throttled events say so (429, Retry-After) even beside bad items: the client retries them later.
            first = throttled or invalid[0][1]
            headers = {"Retry-After": str(first.retry_after_s)} if first.retry_after_s else {}
            return Outcome(first.status, first.body(), headers)
        body: dict[str, Any] = {"accepted": len(events)}
        if opted_out:
            body |= {"ignored": opted_out, "reason": "opt-out"}
        if parsed.is_batch and invalid:
            body["rejected"] = [r.body() for _, r, _ in invalid]
        return Outcome(202, body)


def unavailable() -> Outcome:
    """503 with Retry-After: the request's events could not be made durable (nothing of it was kept)."""
    return Outcome(503, UNAVAILABLE.body(), {"Retry-After": str(UNAVAILABLE.retry_after_s)})


def log_startup(settings: Settings, sites: SiteRegistry) -> None:
    log.info("ingest ready", extra=kv(kafka=settings.kafka.servers, sites=len(sites.sites())))
