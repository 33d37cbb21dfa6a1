"""The ingest ASGI app: HTTP in, :class:`ingest.pipeline.Pipeline` does the work.

Routes: ``POST /api/event`` (Tally's beacons, or Plausible's Events API body),
``GET /api/event.gif`` (no-JS fallback), ``GET /t.js``, ``GET /t.vitals.js`` (the Core Web Vitals
extension), ``GET /healthz``, ``GET /openapi.json``.
The endpoints are module-level functions; :func:`create_app` and :func:`lifespan` wire what
they use onto ``app.state``. Prometheus
metrics are not served here, on the public port, but by ``python -m ingest`` on
``127.0.0.1:<ingest.metrics_port>``.

Who the client is (:class:`ClientAddress`): the TCP peer, unless the peer is a trusted proxy;
then the forwarding header is walked from the right, past every trusted proxy, to the first
address that is not one. Proxies append what they saw, so everything left of that was written
by the client and is never believed.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import gc
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
from prometheus_client import Counter
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ingest.beacon import ParsedBody, Rejection, parse_beacons, parse_item_by_item, parse_valid_body
from ingest.blocks import BlockFollower
from ingest.durable import DurableLog
from ingest.enrich import RequestFacts, opt_out_signalled, parse_agent
from ingest.eventlog import EventLog
from ingest.geo import country_of, use_city_database
from ingest.openapi import openapi_spec
from ingest.pipeline import Outcome, Pipeline, log_startup
from ingest.plausible_events import PlausibleEvents, plausible_event
from ingest.proxies import ClientAddress
from ingest.ratelimit import BlockList, RateLimiter
from ingest.spool import Spool
from tally.log import FailureLog, kv, setup_logging
from tally.settings import Settings, load_settings
from tally.site_registry import SiteRegistry
from topics.sites import follow_sites

log = logging.getLogger("tally.ingest")

SNIPPET = Path(__file__).parent / "static" / "t.min.js"
VITALS_SNIPPET = Path(__file__).parent / "static" / "t.vitals.min.js"  # built from tracker/vitals.js
ACCEPTED_TYPES = ("text/plain", "application/json", "")
CORS = {"Access-Control-Allow-Origin": "*"}
encode_json = msgspec.json.Encoder().encode
PIXEL = base64.b64decode("R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7")
# Requests make no reference cycles, but with dozens in flight the default threshold (700) ran
# a young collection every few requests, and a full one, through the country database's large
# lists, every ~1,700: about a sixth of a worker's CPU. Cycles (if any) are still collected.
GC_YOUNG_THRESHOLD = 10_000
COUNTS_FLUSH_S = 1.0  # accepted-event counters reach the metrics at most this late
# A starting worker waits this long for the sites topic, so that a restart does not refuse a
# runtime site's events; past it (Kafka down), it serves the sites read so far and the seed's.
SITES_WAIT_S = 5.0


class TooLarge(Exception):
    """The body passed the cap; carries its size (as far as known) and its first bytes."""

    def __init__(self, size: int, head: bytes) -> None:
        super().__init__(size)
        self.size, self.head = size, head


def header_values(request: Request, *names: bytes) -> list[str]:
    """The first value of each header (lower-case names), "" when absent: one pass over the raw headers."""
    wanted = dict.fromkeys(names, "")
    for name, value in reversed(request.scope["headers"]):  # reversed: the first occurrence wins
        if name in wanted:
            wanted[name] = value.decode("latin-1")
    return list(wanted.values())


async def read_capped(request: Request, limit: int, declared: str) -> bytes:
    """The request body, refusing anything over ``limit`` bytes without reading much past it.

    ``declared``: the Content-Length header, if any, for the size a refusal reports. Reads the
    ASGI messages itself (as ``Request.stream`` does, without its generator): a beacon is one.
    """
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk: bytes = message.get("body", b"")
        more = message.get("more_body", False)
        if not chunks and not more and len(chunk) <= limit:
            return chunk  # the whole body in one message: no copy
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            head = b"".join(chunks)
            raise TooLarge(int(declared) if declared.isdigit() else size, head)
        if not more:
            return b"".join(chunks)


def settle_heap() -> None:
    """Load what the first request would (UA patterns, country database), then freeze the heap.

    Frozen objects are never scanned by the garbage collector again, so collections only walk
    what requests allocate.
    """
    parse_agent("Mozilla/5.0")
    country_of("81.2.69.142")
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


async def flush_counts_forever(pipeline: Pipeline) -> None:
    """Every ``COUNTS_FLUSH_S``: write the pipeline's buffered counts to Prometheus, and store the
    summaries of refusals counted in minutes now over. The counts once more when stopped."""
    try:
        while True:
            await asyncio.sleep(COUNTS_FLUSH_S)
            pipeline.counts.flush()
            await pipeline.store_suppressed(int(time.time() * 1000))
    finally:
        pipeline.counts.flush()  # stopping: count what is left


def request_facts(request: Request) -> RequestFacts:
    """The visitor's address and user agent, and the time the request was received."""
    addresses: ClientAddress = request.app.state["client_address"]
    return RequestFacts(
        addresses.client_ip(request.scope),
        request.headers.get("user-agent", "")[:1000],
        int(time.time() * 1000),
        opt_out_signalled(request.headers.get("dnt", ""), request.headers.get("sec-gpc", "")),
    )


class SharedResponse(Response):
    """A response built once and sent to many requests; each gets its own copy of the header
    list, since a middleware may add to a response's headers in place."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": list(self.raw_headers)})
        await send({"type": "http.response.body", "body": self.body})


# The answer to nearly every request (one event, accepted) is always the same: built once.
ONE_ACCEPTED = {"accepted": 1}
ONE_ACCEPTED_RESPONSE = SharedResponse(encode_json(ONE_ACCEPTED), 202, headers=CORS, media_type="application/json")


def json_response(outcome: Outcome) -> Response:
    """The HTTP response for ``outcome``: the shared :data:`ONE_ACCEPTED_RESPONSE` when it is a
    plain single accept (nearly every request), else a new JSON response with the CORS header."""
    if outcome.status == 202 and outcome.body == ONE_ACCEPTED and not outcome.headers:
        return ONE_ACCEPTED_RESPONSE
    body = encode_json(outcome.body)
    return Response(body, outcome.status, headers=CORS | outcome.headers, media_type="application/json")


def pipeline_of(request: Request) -> Pipeline:
    """This worker's pipeline, which :func:`lifespan` put on ``app.state``.

    The endpoints read ``app.state`` by key: its attribute access goes through ``__getattr__``,
    which on Python 3.11 first raises and catches an AttributeError (an exception object and
    ~0.7 µs a request); the key is a plain dict lookup.
    """
    pipeline: Pipeline = request.app.state["pipeline"]
    return pipeline


FAILURES = FailureLog(log, "request failed: a bug, not the client's fault")
FAILED = Counter("tally_ingest_failed_requests_total", "Requests answered 500 (a bug), by exception kind", ["kind"])


def failing_soft(endpoint: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """The endpoint, with an unexpected exception answered 500 and logged once in full per kind,
    then as one line with a count (:class:`tally.log.FailureLog`), never a traceback per request."""

    @functools.wraps(endpoint)
    async def answer(request: Request) -> Response:
        try:
            return await endpoint(request)
        except (ClientDisconnect, asyncio.CancelledError):
            raise
        except Exception as e:
            FAILURES.record(e, path=request.url.path)
            FAILED.labels(kind=type(e).__name__).inc()
            body = {"error": "internal_error", "message": "ingest failed on this request; it was logged"}
            return Response(encode_json(body), 500, headers=CORS, media_type="application/json")

    return answer


@failing_soft
async def post_event(request: Request) -> Response:
    """``POST /api/event``: one beacon or a batch, as text/plain or application/json; or one event
    in Plausible's Events API body (ingest/plausible_events.py)."""
    pipeline = pipeline_of(request)
    ingest = pipeline.settings.ingest
    received_at = int(time.time() * 1000)
    content_type, declared, user_agent, dnt, gpc = header_values(
        request, b"content-type", b"content-length", b"user-agent", b"dnt", b"sec-gpc"
    )
    content_type = content_type.split(";")[0].strip().lower()
    addresses: ClientAddress = request.app.state["client_address"]
    ip = addresses.client_ip(request.scope)  # refusals are limited per client too
    limit = ingest.max_body_bytes
    try:
        body = await read_capped(request, limit, declared)
    except TooLarge as e:
        rejection = Rejection(413, "body_too_large", f"body exceeds {limit} bytes (got {e.size})")
        # The dead letter keeps the head of the body (truncated, and marked so) for recovery.
        return json_response(await pipeline.refuse(rejection, e.head, received_at, ip))
    if content_type not in ACCEPTED_TYPES:
        rejection = Rejection(415, "unsupported_media_type", "send the event as text/plain or application/json")
        return json_response(await pipeline.refuse(rejection, body, received_at, ip))
    facts = RequestFacts(ip, user_agent[:1000], received_at, opt_out_signalled(dnt, gpc))
    parsed: ParsedBody | Rejection | None = parse_valid_body(body, max_batch=ingest.max_batch)
    if parsed is None:  # not Tally's valid body: Plausible's Events API body (docs/EVENTS-API.md), or invalid
        event = plausible_event(body)
        if event is not None:
            plausible: PlausibleEvents = request.app.state["plausible_events"]
            return json_response(await plausible.accept(event, body, pipeline, facts))
        parsed = parse_item_by_item(body, max_batch=ingest.max_batch)
    if isinstance(parsed, Rejection):
        return json_response(await pipeline.refuse(parsed, body, received_at, ip))
    return json_response(await pipeline.accept(parsed, facts))


@failing_soft
async def pixel(request: Request) -> Response:
    """No-JS page view: ``<img src=".../api/event.gif?s=SITE">``; the id and times are the server's."""
    pipeline = pipeline_of(request)
    facts = request_facts(request)
    query = request.query_params
    item = {
        "id": str(uuid.uuid4()),
        "k": "pageview",
        "s": query.get("s", ""),
        "te": facts.ts_received,
        "u": query.get("u") or request.headers.get("referer", ""),
        "ts": facts.ts_received,
    }
    if query.get("r"):
        item["r"] = query["r"]
    parsed = parse_beacons(json.dumps(item).encode(), max_batch=1)
    assert isinstance(parsed, ParsedBody), "one JSON object always decodes"
    outcome = await pipeline.accept(parsed, facts)
    return Response(PIXEL, outcome.status, media_type="image/gif", headers={"Cache-Control": "no-store"})


def script_response(body: bytes) -> Response:
    """A tracker script: JavaScript, cached for an hour, readable from any origin."""
    headers = {"Cache-Control": "public, max-age=3600"} | CORS
    return Response(body, media_type="application/javascript", headers=headers)


async def snippet(request: Request) -> Response:
    """``GET /t.js``: the tracker script, read once by :func:`create_app`."""
    return script_response(request.app.state["snippet"])


async def vitals_snippet(request: Request) -> Response:
    """``GET /t.vitals.js``: the optional Core Web Vitals extension, read once by :func:`create_app`."""
    return script_response(request.app.state["vitals_snippet"])


async def healthz(request: Request) -> Response:
    """``GET /healthz``: ``ok``; ``draining`` while the spool is being replayed to Kafka; ``degraded``
    while events wait in the spool and are not draining (Kafka down or slow, a replay failing)."""
    store: DurableLog = request.app.state["durable_log"]
    blocks: BlockList = request.app.state["blocks"]
    health = store.health()
    body = {"status": health.status, "spooled": health.spooled, "spool_bytes": health.spool_bytes}
    return JSONResponse(body | {"blocked_clients": len(blocks)})


async def openapi(request: Request) -> Response:
    """``GET /openapi.json``: the endpoint's description, built once by :func:`create_app`.

    Public on purpose: it describes only what the public endpoint already shows every page
    that embeds the snippet (routes, the beacon's fields and limits), and no settings, version
    or internals (ingest/openapi.py)."""
    spec: dict[str, Any] = request.app.state["openapi_spec"]
    return JSONResponse(spec)


async def preflight(_request: Request) -> Response:
    """``OPTIONS /api/event``: the CORS preflight."""
    headers = CORS | {"Access-Control-Allow-Methods": "POST", "Access-Control-Allow-Headers": "Content-Type"}
    return Response(status_code=204, headers=headers)


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    """One worker's life: connect to Kafka, put the pipeline and its durable log on ``app.state``,
    replay the spool and flush the counters in the background; close it all on the way out."""
    setup_logging()  # uvicorn's spawned workers do not inherit the parent's handlers: without it, no fields
    state = app.state
    settings: Settings = state.settings
    kafka = EventLog(client_config=settings.kafka.client_config(), linger_ms=settings.ingest.linger_ms)
    store = DurableLog(kafka, Spool(settings.home_dir / "spool"), ack_timeout_ms=settings.ingest.ack_timeout_ms)
    follower = BlockFollower(
        client_config=settings.kafka.client_config(), topic=settings.kafka.ratelimit_topic, blocks=state.blocks
    )
    sites = follow_sites(settings.kafka, state.sites, reader="ingest")
    state.durable_log = store
    state.pipeline = pipeline = Pipeline(settings, store, state.limiter, sites=state.sites)
    replayer = asyncio.create_task(store.replay_forever())
    counter = asyncio.create_task(flush_counts_forever(pipeline))
    settle_heap()
    if not await asyncio.to_thread(sites.caught_up.wait, SITES_WAIT_S):
        log.warning("sites topic not read yet: serving the sites of conf/ until it is", extra=kv(wait_s=SITES_WAIT_S))
    log_startup(settings, state.sites)
    try:
        yield
    finally:
        for task in (replayer, counter):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        try:
            await pipeline.store_suppressed()  # the counts of refusals not stored yet, whatever their minute
        finally:
            follower.close()
            sites.close()
            kafka.close()
            store.spool.close()


def create_app(settings: Settings | None = None) -> Starlette:
    """Build the ASGI app (uvicorn's factory: ``ingest.app:create_app``).

    Wires ``app.state`` for the endpoints: ``settings``, ``sites`` (the current sites, which the
    worker's :func:`topics.sites.follow_sites` keeps current), ``blocks`` (the published rate-limit
    blocks), ``limiter``, ``client_address`` (the trusted proxies, parsed once), ``snippet`` (the
    tracker's bytes), ``vitals_snippet`` (the Core Web Vitals extension's), ``openapi_spec`` and
    ``plausible_events`` (the sites by domain, for Plausible's body); :func:`lifespan` adds each
    worker's ``durable_log`` and ``pipeline``.
    """
    settings = settings or load_settings()
    use_city_database(settings.geo.city_db_path)  # each worker opens it (memory-mapped) before its first request
    routes = [
        Route("/api/event", post_event, methods=["POST"]),
        Route("/api/event", preflight, methods=["OPTIONS"]),
        Route("/api/event.gif", pixel, methods=["GET"]),
        Route("/t.js", snippet, methods=["GET"]),
        Route("/t.vitals.js", vitals_snippet, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/openapi.json", openapi, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    blocks = BlockList()
    app.state.settings = settings
    app.state.sites = sites = SiteRegistry(seed=settings.sites)
    app.state.blocks = blocks
    app.state.limiter = RateLimiter(site_events_per_second=settings.ratelimit.site_events_per_second, blocks=blocks)
    app.state.client_address = ClientAddress(
        trusted_proxies=settings.ingest.trusted_proxies, header=settings.ingest.proxy_header
    )
    app.state.snippet = SNIPPET.read_bytes()
    app.state.vitals_snippet = VITALS_SNIPPET.read_bytes()
    app.state.openapi_spec = openapi_spec(max_batch=settings.ingest.max_batch)
    app.state.plausible_events = PlausibleEvents(sites=sites)
    return app
