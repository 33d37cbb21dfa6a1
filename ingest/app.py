"""The ingest ASGI app: validate -> enrich -> append to Kafka; refusals go to the dead letters.

Routes: ``POST /api/event``, ``GET /t.js``, ``GET /healthz``, ``GET /metrics``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, Counter, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ingest.beacon import Beacon, ParsedBody, Rejection, parse_beacons
from ingest.enrich import EnrichError, RequestFacts, enrich
from ingest.eventlog import AppendFailed, EventLog
from ingest.salts import SaltStore
from tally.deadletter import dead_letter
from tally.log import kv
from tally.schema import PageViewEvent
from tally.settings import Settings, load_settings

log = logging.getLogger("tally.ingest")

SNIPPET = Path(__file__).parent / "static" / "t.js"
ACCEPTED_TYPES = ("text/plain", "application/json", "")
CORS = {"Access-Control-Allow-Origin": "*"}

EVENTS = Counter("tally_ingest_events_total", "Events by outcome", ["outcome"])


class TooLarge(Exception):
    pass


async def _read_capped(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise TooLarge(int(declared))
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise TooLarge(len(body))
    return bytes(body)


def client_ip(request: Request, trusted_proxies: tuple[str, ...]) -> str:
    """The visitor's IP: X-Forwarded-For's first hop, but only from a trusted proxy."""
    peer = request.client.host if request.client else ""
    forwarded = request.headers.get("x-forwarded-for")
    if forwarded and peer in trusted_proxies:
        return forwarded.split(",")[0].strip()
    return peer


class Ingest:
    """Holds the per-process state of the endpoint: settings, the Kafka log, salts."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.salts = SaltStore(settings.home_dir / "salts")
        self.log: EventLog | None = None

    async def reject(self, rejection: Rejection, payload: bytes, received_at: int) -> None:
        """Record one refusal in the dead-letter topic (best effort if Kafka itself is down)."""
        EVENTS.labels(outcome=rejection.kind).inc()
        letter = dead_letter(
            component="tally-ingest",
            kind=rejection.kind,
            message=rejection.message,
            status=rejection.status,
            received_at=received_at,
            payload=payload,
            errors=list(rejection.errors),
        )
        assert self.log is not None
        try:
            await self.log.append(self.settings.kafka.rejected_topic, [(None, letter.to_json())])
        except AppendFailed as e:
            log.error("dead letter not written", extra=kv(kind=rejection.kind, error=str(e)))

    def check_site(self, beacon: Beacon, event: PageViewEvent) -> Rejection | None:
        site = self.settings.site(beacon.s)
        if site is None:
            return Rejection(403, "unknown_site", f"site_id {beacon.s!r} is not configured in conf/")
        if site.domains and event.hostname not in site.domains:
            return Rejection(403, "foreign_host", f"host {event.hostname!r} does not belong to site {beacon.s!r}")
        return None

    async def post_event(self, request: Request) -> Response:
        received_at = int(time.time() * 1000)
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        limit = self.settings.ingest.max_body_bytes
        try:
            body = await _read_capped(request, limit)
        except TooLarge as e:
            rejection = Rejection(413, "body_too_large", f"body exceeds {limit} bytes (got {e.args[0]})")
            await self.reject(rejection, b"", received_at)
            return JSONResponse(rejection.body() | {"max_bytes": limit}, rejection.status, headers=CORS)
        if content_type not in ACCEPTED_TYPES:
            rejection = Rejection(415, "unsupported_media_type", "send text/plain or application/json")
            await self.reject(rejection, body, received_at)
            return JSONResponse(rejection.body(), rejection.status, headers=CORS)
        parsed = parse_beacons(body, max_batch=self.settings.ingest.max_batch)
        if isinstance(parsed, Rejection):
            await self.reject(parsed, body, received_at)
            return JSONResponse(parsed.body(), parsed.status, headers=CORS)
        return await self._accept(request, parsed, received_at)

    async def _accept(self, request: Request, parsed: ParsedBody, received_at: int) -> Response:
        facts = RequestFacts(
            client_ip(request, self.settings.ingest.trusted_proxies),
            request.headers.get("user-agent", "")[:1000],
            received_at,
        )
        salt = self.salts.salt_for(received_at)
        invalid = list(parsed.invalid)
        events: list[PageViewEvent] = []
        for beacon in parsed.beacons:
            try:
                event = enrich(beacon, facts, salt=salt)
            except EnrichError as e:
                error = {"field": "u (url)", "error": str(e)}
                invalid.append((beacon.model_dump(), Rejection(422, "invalid_url", str(e), (error,))))
                continue
            refusal = self.check_site(beacon, event)
            if refusal:
                invalid.append((beacon.model_dump(), refusal))
            else:
                events.append(event)
        for item, rejection in invalid:
            await self.reject(rejection, json.dumps(item, default=str).encode(), received_at)
        if events:
            assert self.log is not None
            try:
                await self.log.append(
                    self.settings.kafka.pageviews_topic, [(e.visitor_id.encode(), e.to_json()) for e in events]
                )
            except AppendFailed as e:
                log.error("kafka append failed", extra=kv(events=len(events), error=str(e)))
                EVENTS.labels(outcome="unavailable").inc(len(events))
                unavailable = {"error": "unavailable", "message": "the event log is unavailable; retry later"}
                return JSONResponse(unavailable, 503, headers=CORS | {"Retry-After": "5"})
            EVENTS.labels(outcome="accepted").inc(len(events))
        if not events:
            first = invalid[0][1]
            return JSONResponse(first.body(), first.status, headers=CORS)
        accepted: dict[str, Any] = {"accepted": len(events)}
        if parsed.is_batch and invalid:
            accepted["rejected"] = [r.body() for _, r in invalid]
        return JSONResponse(accepted, 202, headers=CORS)


def create_app(settings: Settings | None = None) -> Starlette:
    """Build the ASGI app (uvicorn's factory: ``ingest.app:create_app``)."""
    ingest = Ingest(settings or load_settings())

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        ingest.log = EventLog(bootstrap_servers=ingest.settings.kafka.servers)
        log.info("ingest ready", extra=kv(kafka=ingest.settings.kafka.servers))
        yield
        undelivered = ingest.log.close()
        log.info("ingest stopped", extra=kv(undelivered=undelivered))

    async def snippet(_request: Request) -> Response:
        headers = {"Cache-Control": "public, max-age=3600"} | CORS
        return Response(SNIPPET.read_bytes(), media_type="application/javascript", headers=headers)

    async def healthz(_request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def metrics(_request: Request) -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    async def preflight(_request: Request) -> Response:
        headers = CORS | {"Access-Control-Allow-Methods": "POST", "Access-Control-Allow-Headers": "Content-Type"}
        return Response(status_code=204, headers=headers)

    routes = [
        Route("/api/event", ingest.post_event, methods=["POST"]),
        Route("/api/event", preflight, methods=["OPTIONS"]),
        Route("/t.js", snippet, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)
