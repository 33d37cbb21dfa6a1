"""Run the ingest endpoint under uvicorn with the configured workers: ``python -m ingest``.

This process also serves Prometheus ``/metrics``, summed over its workers, on
``127.0.0.1:<ingest.metrics_port>``: never on the public port, which anyone can reach.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from wsgiref.simple_server import WSGIServer

import uvicorn

from ingest.geo import CityDatabase
from tally.log import setup_logging
from tally.settings import SettingsError, load_settings


def serve_metrics(port: int) -> WSGIServer:
    """Serve the workers' summed counters on 127.0.0.1:``port`` from a thread of this process.

    Workers write their counters to ``PROMETHEUS_MULTIPROC_DIR`` (accepted events at most
    ``ingest.app.COUNTS_FLUSH_S`` late), which must be set before they start.
    """
    # Imported here: prometheus_client picks its multi-process value files when first imported,
    # so only once PROMETHEUS_MULTIPROC_DIR is set (with one worker, it runs in this process).
    from prometheus_client import CollectorRegistry, multiprocess, start_http_server

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    try:
        server, _thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    except OSError as e:
        sys.exit(
            f"python -m ingest: cannot serve metrics on 127.0.0.1:{port} ({e.strerror}); stop what holds "
            "the port, or set ingest.metrics_port (--metrics-port; 0 = off)"
        )
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ingest", description="Run the Tally ingest endpoint.")
    parser.add_argument("--port", type=int, help="override ingest.port")
    parser.add_argument("--workers", type=int, help="override ingest.workers")
    parser.add_argument("--metrics-port", type=int, help="override ingest.metrics_port (127.0.0.1 only; 0 = off)")
    args = parser.parse_args(argv)
    setup_logging()
    settings = load_settings()
    if settings.geo.city_db_path:
        try:  # the workers open it too: a missing or bad file stops ingest here, once, not each worker
            CityDatabase(settings.geo.city_db_path).close()
        except SettingsError as e:
            sys.exit(f"python -m ingest: {e}")
    # Each worker writes its Prometheus counters here; serve_metrics sums them.
    port = args.port or settings.ingest.port
    metrics_dir = settings.home_dir / "ingest-metrics" / str(port)  # one per server, shared by its workers
    shutil.rmtree(metrics_dir, ignore_errors=True)
    metrics_dir.mkdir(parents=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    metrics_port = settings.ingest.metrics_port if args.metrics_port is None else args.metrics_port
    if metrics_port:
        serve_metrics(metrics_port)
    uvicorn.run(
        "ingest.app:create_app",
        factory=True,
        host=settings.ingest.host,
        port=port,
        workers=args.workers or settings.ingest.workers,
        log_level="warning",
        access_log=False,
        proxy_headers=False,  # ingest.app.ClientAddress decides which forwarded address to trust
    )


if __name__ == "__main__":
    main()
