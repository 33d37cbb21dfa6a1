"""Run the Stats API under uvicorn: ``python -m api`` (``tally up`` starts it)."""

from __future__ import annotations

import argparse

import uvicorn

from api.app import create_app
from tally.log import setup_logging
from tally.settings import load_settings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m api", description="Run Tally's Stats API (POST /api/v2/query, Plausible v2 compatible)."
    )
    parser.add_argument("--port", type=int, help="override api.port")
    args = parser.parse_args(argv)
    setup_logging()
    settings = load_settings()
    uvicorn.run(
        create_app(settings),
        host=settings.api.host,
        port=args.port or settings.api.port,
        log_level="warning",
        access_log=False,
        proxy_headers=False,  # the key, not the client address, is what a request is judged by
    )


if __name__ == "__main__":
    main()
