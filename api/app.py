"""The Stats API: ``POST /api/v2/query``, Plausible's Stats API v2 request and response shape.

Every request carries ``Authorization: Bearer <key>`` (``tally apikey create``); a key reads only
the sites it was created for and is limited to ``api.requests_per_hour``. The body is read into a
:class:`query.spec.Query` (:mod:`query.plausible`) and answered by the query layer
(:mod:`query.engine`), the same code the dashboard's panels use. Errors are JSON
``{"error": …}`` with the status that says who must act: 400 a query Tally cannot answer (naming
the part), 401 no or a bad key, 403 a site the key may not read, 413 a body too large, 429 over
the key's hourly limit (with ``Retry-After``).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from api.keys import ApiKey, keys_path, load_keys, verify
from api.openapi import openapi_spec
from api.throttle import HourlyLimit
from query.engine import Answer, run
from query.plausible import parse_query
from query.sources import Sources
from query.spec import Query, QueryError
from tally.log import kv
from tally.settings import Settings, load_settings

log = logging.getLogger("tally.api")


class Keys:
    """The key records, read again whenever ``tally apikey`` changed the file."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._stamp: float | None = None
        self._keys: dict[str, ApiKey] = {}

    def current(self) -> dict[str, ApiKey]:
        path = keys_path(self.settings)
        stamp = path.stat().st_mtime_ns if path.exists() else None
        if stamp != self._stamp:
            self._keys, self._stamp = load_keys(self.settings), stamp
        return self._keys


def error(status: int, message: str, **fields: str) -> JSONResponse:
    """A JSON error: ``{"error": message, …fields}``."""
    return JSONResponse({"error": message, **fields}, status_code=status)


async def query_endpoint(request: Request) -> Response:
    state = request.app.state
    settings: Settings = state.settings
    header = request.headers.get("authorization", "")
    scheme, _, presented = header.partition(" ")
    key = verify(state.keys.current(), presented.strip()) if scheme.lower() == "bearer" else None
    if key is None:
        return error(401, "missing or invalid API key: send 'Authorization: Bearer <key>' (tally apikey create)")
    wait = state.limit.take(key.key_id, time.time())
    if wait:
        return JSONResponse(
            {"error": f"over this key's limit of {settings.api.requests_per_hour} requests an hour"},
            status_code=429,
            headers={"Retry-After": str(wait)},
        )
    body = await _read_body(request, settings.api.max_body_bytes)
    if body is None:
        return error(413, f"the request body is over {settings.api.max_body_bytes} bytes")
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return error(400, "the request body is not valid JSON")
    try:
        query = parse_query(parsed, today=dt.datetime.now(dt.UTC).date())
    except QueryError as e:
        return error(400, str(e), part=e.part)
    # The key's scope first: a key for site A learns nothing about which other sites exist.
    if not key.may_read(query.site_id):
        return error(403, f"this API key may not read site {query.site_id!r}")
    if settings.site(query.site_id) is None:
        return error(400, f"site {query.site_id!r} is not configured in Tally")
    try:
        answer = await run_in_threadpool(_answer, state.sources, query)
    except QueryError as e:
        return error(400, str(e), part=e.part)
    log.info(
        "query answered",
        extra=kv(key=key.key_id, site=query.site_id, rows=len(answer.results), source=answer.meta["source"]),
    )
    return JSONResponse({"results": answer.results, "meta": answer.meta, "query": _echo(query, parsed)})


def _answer(sources: Sources, query: Query) -> Answer:
    return run(query, lambda filters: sources.report(query.site_id, query.start, query.end, filters))


async def _read_body(request: Request, limit: int) -> bytes | None:
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _echo(query: Query, body: dict[str, Any]) -> dict[str, Any]:
    """The query as answered: the request's own parts, with the range resolved to dates."""
    echoed: dict[str, Any] = {
        k: body[k] for k in ("site_id", "metrics", "dimensions", "filters", "order_by", "include") if k in body
    }
    echoed["date_range"] = [query.start.isoformat(), query.end.isoformat()]
    echoed["order_by"] = [[name, "desc" if desc else "asc"] for name, desc in query.order_by]
    echoed["pagination"] = {"limit": query.limit, "offset": query.offset}
    return echoed


async def openapi_endpoint(request: Request) -> Response:
    return JSONResponse(openapi_spec())


async def health_endpoint(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


def create_app(settings: Settings | None = None) -> Starlette:
    """The API app; ``settings`` defaults to the loaded configuration."""
    settings = settings or load_settings()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        log.info("api started", extra=kv(port=settings.api.port, warehouse=settings.warehouse_uri))
        yield

    app = Starlette(
        routes=[
            Route("/api/v2/query", query_endpoint, methods=["POST"]),
            Route("/openapi.json", openapi_endpoint, methods=["GET"]),
            Route("/healthz", health_endpoint, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.keys = Keys(settings)
    app.state.limit = HourlyLimit(settings.api.requests_per_hour)
    app.state.sources = Sources(settings)
    return app
