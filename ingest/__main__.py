"""Run the ingest endpoint under uvicorn with the configured workers: ``python -m ingest``."""

from __future__ import annotations

import argparse
import os
import shutil

import uvicorn

from tally.log import setup_logging
from tally.settings import load_settings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ingest", description="Run the Tally ingest endpoint.")
    parser.add_argument("--port", type=int, help="override ingest.port")
    parser.add_argument("--workers", type=int, help="override ingest.workers")
    args = parser.parse_args(argv)
    setup_logging()
    settings = load_settings()
    # Several workers: each writes its Prometheus counters here, /metrics sums them.
    port = args.port or settings.ingest.port
    metrics_dir = settings.home_dir / "ingest-metrics" / str(port)  # one per server, shared by its workers
    shutil.rmtree(metrics_dir, ignore_errors=True)
    metrics_dir.mkdir(parents=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    uvicorn.run(
        "ingest.app:create_app",
        factory=True,
        host=settings.ingest.host,
        port=port,
        workers=args.workers or settings.ingest.workers,
        log_level="warning",
        access_log=False,
        proxy_headers=False,  # ingest.app decides which X-Forwarded-For to trust
    )


if __name__ == "__main__":
    main()
