"""The Stats API: ``POST /api/v2/query``, Plausible's Stats API v2 request and response shape.

Every request carries ``Authorization: Bearer <key>`` (``tally apikey create``); a key reads only
the sites it was created for and is limited to ``api.requests_per_hour``. The body is read into a
:class:`query.spec.Query` (:mod:`query.plausible`) and answered by the query layer
(:mod:`query.engine`), the same code the dashboard's panels use, through
:class:`api.answering.Answering`, which the MCP server (:mod:`api.mcp_server`) shares. Errors are JSON
``{"error": …}`` with the status that says who must act: 400 a query Tally cannot answer (naming
the part), 401 no or a bad key, 403 a site the key may not read, 413 a body too large, 429 over
the key's hourly limit or its share of the raw budget, 503 every slot of the raw budget held
(both with ``Retry-After``; :mod:`api.budget`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from api.answering import Answering, Refused
from api.keys import ApiKey
from api.openapi import openapi_spec
from api.sites import SiteAdmin, site_endpoint, sites_endpoint
from tally.log import kv
from tally.settings import Settings, load_settings

log = logging.getLogger("tally.api")


def error(status: int, message: str, **fields: str) -> JSONResponse:
    """A JSON error: ``{"error": message, …fields}``."""
    return JSONResponse({"error": message, **fields}, status_code=status)


async def query_endpoint(request: Request) -> Response:
    """``POST /api/v2/query``: the gate and the answer are :class:`api.answering.Answering`'s; here only HTTP."""
    answering: Answering = request.app.state.answering
    key = _bearer(request, answering)
    if key is None:
        return error(401, "missing or invalid API key: send 'Authorization: Bearer <key>' (tally apikey create)")
    try:
        answering.admit(key)
        parsed = await _json_body(request, answering)
        return JSONResponse(await run_in_threadpool(answering.answer, key, parsed))
    except Refused as refused:
        return _refusal(refused)


async def annotations_endpoint(request: Request) -> Response:
    """``GET /api/v1/annotations?site_id=…`` lists a site's annotations; ``POST`` adds one
    (``{"site_id", "date", "text"}``) to a site the key may read."""
    answering: Answering = request.app.state.answering
    key = _bearer(request, answering)
    if key is None:
        return error(401, "missing or invalid API key: send 'Authorization: Bearer <key>' (tally apikey create)")
    try:
        answering.admit(key)
        if request.method == "GET":
            site_id = request.query_params.get("site_id", "")
            return JSONResponse({"annotations": await run_in_threadpool(answering.annotations, key, site_id)})
        parsed = await _json_body(request, answering)
        return JSONResponse(await run_in_threadpool(answering.annotate, key, parsed), status_code=201)
    except Refused as refused:
        return _refusal(refused)


async def _json_body(request: Request, answering: Answering) -> Any:
    """The decoded JSON body; :class:`Refused` 413 past ``api.max_body_bytes``, 400 for bad JSON."""
    body = await _read_body(request, answering.settings.api.max_body_bytes)
    if body is None:
        raise answering.body_too_large()
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:  # RecursionError: nested thousands deep
        raise Refused(400, "the request body is not valid JSON") from e


def _bearer(request: Request, answering: Answering) -> ApiKey | None:
    scheme, _, presented = request.headers.get("authorization", "").partition(" ")
    return answering.authenticate(presented) if scheme.lower() == "bearer" else None


def _refusal(refused: Refused) -> JSONResponse:
    headers = {"Retry-After": str(refused.retry_after)} if refused.retry_after else None
    return JSONResponse(refused.fields(), status_code=refused.status, headers=headers)


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


async def openapi_endpoint(request: Request) -> Response:
    return JSONResponse(openapi_spec())


async def health_endpoint(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


def create_app(settings: Settings | None = None) -> Starlette:
    """The API app; ``settings`` defaults to the loaded configuration."""
    settings = settings or load_settings()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        site_admin.start()  # follow the sites topic: sites added at runtime (api/sites.py)
        log.info("api started", extra=kv(port=settings.api.port, warehouse=settings.warehouse_uri))
        try:
            yield
        finally:
            site_admin.close()
            answering.close()  # the raw question workers

    app = Starlette(
        routes=[
            Route("/api/v2/query", query_endpoint, methods=["POST"]),
            Route("/api/v1/annotations", annotations_endpoint, methods=["GET", "POST"]),
            Route("/api/v1/sites", sites_endpoint, methods=["GET", "POST"]),
            Route("/api/v1/sites/{site_id}", site_endpoint, methods=["PUT", "DELETE"]),
            Route("/openapi.json", openapi_endpoint, methods=["GET"]),
            Route("/healthz", health_endpoint, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.answering = answering = Answering(settings)
    app.state.site_admin = site_admin = SiteAdmin(settings, answering)
    return app
