"""The baseline of ``bench.ingest``: the same server and tuning as ingest, doing no work.

``python -m bench.bare_app --port P --workers N`` runs it the way ``python -m ingest`` runs
ingest (:data:`SERVER_OPTIONS`, the same uvicorn options; a unit test holds the two in step).
Each worker settles its heap as ingest's does (``ingest.app.settle_heap``: GC frozen, young
threshold raised), reads the body as ingest reads it, and answers with ingest's shared
``202 {"accepted": 1}``. All that is left is what ingest does on top: parse, enrich, rate-limit
and wait for Kafka's acknowledgement.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ingest.app import ONE_ACCEPTED_RESPONSE, read_capped, settle_heap
from tally.settings import load_settings

# ingest/__main__.py's uvicorn.run options, bar the app, port and workers.
SERVER_OPTIONS: dict[str, Any] = {"log_level": "warning", "access_log": False, "proxy_headers": False}


async def accept(request: Request) -> Response:
    """Read the body (capped, as ingest does) and answer what ingest answers a single beacon."""
    limit: int = request.app.state.max_body_bytes
    await read_capped(request, limit, "")
    return ONE_ACCEPTED_RESPONSE


@asynccontextmanager
async def lifespan(_app: Starlette) -> AsyncIterator[None]:
    settle_heap()  # ingest's GC tuning, run at the same point of a worker's start
    yield


def create_app() -> Starlette:
    """uvicorn's factory: ``bench.bare_app:create_app``."""
    app = Starlette(routes=[Route("/api/event", accept, methods=["POST"])], lifespan=lifespan)
    app.state.max_body_bytes = load_settings().ingest.max_body_bytes
    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bare_app", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workers", type=int, required=True)
    args = parser.parse_args(argv)
    settings = load_settings()
    uvicorn.run(
        "bench.bare_app:create_app",
        factory=True,
        host=settings.ingest.host,
        port=args.port,
        workers=args.workers,
        **SERVER_OPTIONS,
    )


if __name__ == "__main__":
    main()
