"""Stats API benchmark: representative ``POST /api/v2/query`` questions over the dashboard's data set,
side by side with the same questions answered by scanning raw events with DuckDB, in the same run.

The API runs under uvicorn on a free port and is called over HTTP with a key of its own. Both sides
are timed alike (:func:`bench.dashboard.timed`): a fresh reader answers once (for the API, a server
just started: its first answer loads the table snapshots), then the same reader answers warm.
The data set is the one ``bench.dashboard`` builds and keeps (``--events``, 90 days).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import functools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn

from bench.dashboard import SITE, RawScans, dataset, timed
from bench.report import Figure, print_figures
from ops.stack import free_ports
from tally.log import setup_logging
from tally.settings import Settings

GOAL_MS = 150.0  # the goal for a query the aggregates answer, p95


def questions(first: dt.date, last: dt.date) -> dict[str, dict[str, Any]]:
    """Name -> Plausible v2 body, over the data set's days (the issue's six representative questions)."""
    span = {"site_id": SITE, "date_range": [first.isoformat(), last.isoformat()]}
    month = {"site_id": SITE, "date_range": [(last - dt.timedelta(days=29)).isoformat(), last.isoformat()]}
    return {
        "site totals vs previous 30 days": {
            **month,
            "metrics": ["visitors", "visits", "pageviews", "bounce_rate", "visit_duration"],
            "include": {"compare": "previous_period"},
        },
        "time series by day": {**span, "metrics": ["visitors", "pageviews"], "dimensions": ["time:day"]},
        "top pages": {
            **span,
            "metrics": ["visitors", "pageviews"],
            "dimensions": ["event:page"],
            "pagination": {"limit": 10},
        },
        "sources but direct": {
            **span,
            "metrics": ["visitors", "pageviews"],
            "dimensions": ["visit:source"],
            "filters": [["is_not", "visit:source", ["(none)"]]],
        },
        "props of signups": {
            **span,
            "metrics": ["visitors", "events"],
            "dimensions": ["event:props:plan"],
            "filters": [["is", "event:name", ["signup"]]],
        },
        "filtered (answered from raw)": {
            **span,
            "metrics": ["visitors", "pageviews"],
            "filters": [["is", "visit:country", ["DE"]]],
        },
    }


def raw_sql(first: dt.date, last: dt.date) -> dict[str, str]:
    """The same questions as DuckDB scans of raw.pageviews (exact)."""
    where = f"site_id = '{SITE}' AND event_date BETWEEN DATE '{first}' AND DATE '{last}' AND NOT is_bot"
    before, start = last - dt.timedelta(days=59), last - dt.timedelta(days=29)
    both = f"site_id = '{SITE}' AND event_date BETWEEN DATE '{before}' AND DATE '{last}' AND NOT is_bot"
    return {
        "site totals vs previous 30 days": (
            f"SELECT event_date >= DATE '{start}' AS now, count(*) FILTER (WHERE type = 'pageview'), "
            f"count(DISTINCT visitor_id) FROM raw WHERE {both} GROUP BY 1"
        ),
        "time series by day": (
            "SELECT event_date, count(*) FILTER (WHERE type = 'pageview'), count(DISTINCT visitor_id) "
            f"FROM raw WHERE {where} GROUP BY 1"
        ),
        "top pages": (
            "SELECT path, count(*) FILTER (WHERE type = 'pageview') AS v, count(DISTINCT visitor_id) "
            f"FROM raw WHERE {where} GROUP BY 1 ORDER BY v DESC LIMIT 10"
        ),
        "sources but direct": (
            "SELECT source, count(*) FILTER (WHERE type = 'pageview'), count(DISTINCT visitor_id) "
            f"FROM raw WHERE {where} AND source IS NOT NULL GROUP BY 1"
        ),
        "props of signups": (
            "SELECT props['plan'], count(*), count(DISTINCT visitor_id) "
            f"FROM raw WHERE {where} AND type = 'event' AND name = 'signup' AND props['plan'] IS NOT NULL GROUP BY 1"
        ),
        "filtered (answered from raw)": (
            "SELECT count(DISTINCT visitor_id), count(*) FILTER (WHERE type = 'pageview') "
            f"FROM raw WHERE {where} AND country = 'DE'"
        ),
    }


def raw_scan(settings: Settings, sql: str) -> Callable[[], Any]:
    """One question over raw events behind a new reader (:class:`bench.dashboard.RawScans`)."""
    reader = RawScans(settings)
    return lambda: reader.query(sql)


@contextmanager
def api_server(settings: Settings) -> Iterator[str]:
    """A fresh API process-equivalent (its own app and readers) on a free port; yields its query URL."""
    from api.app import create_app

    (port,) = free_ports(1)
    own = dataclasses.replace(settings, api=dataclasses.replace(settings.api, port=port, requests_per_hour=10**9))
    server = uvicorn.Server(uvicorn.Config(create_app(own), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/api/v2/query"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def measure(quick: bool = False, *, events: int | None = None, days: int = 90, runs: int | None = None) -> list[Figure]:
    """Each question through the API (p50, p95, first answer) and as a raw scan, side by side."""
    from api.keys import create_key

    events = events or (300_000 if quick else 10_000_000)
    runs = runs or (5 if quick else 20)
    settings, last = dataset(events, days)
    first = last - dt.timedelta(days=days - 1)
    key, _ = create_key(settings, name="bench.api", sites=(SITE,), now=dt.datetime.now(dt.UTC))
    headers = {"Authorization": f"Bearer {key}"}
    bodies, sqls = questions(first, last), raw_sql(first, last)
    figures: list[Figure] = []
    for name, body in bodies.items():
        with api_server(settings) as url, httpx.Client(headers=headers, timeout=600) as client:

            def ask(url: str = url, client: httpx.Client = client, body: dict[str, Any] = body) -> Callable[[], Any]:
                def call() -> Any:
                    answer = client.post(url, json=body)
                    assert answer.status_code == 200, answer.text
                    return answer.json()

                return call

            answered = timed(ask, runs)
            source = ask()()["meta"]["source"]
        raw = timed(functools.partial(raw_scan, settings, sqls[name]), max(2, runs // 4))
        goal = f"≤ {GOAL_MS:.0f} ms" if source == "aggregates" else ""
        figures += [
            Figure(f"{name}: first answer", answered.first, "ms", note=f"a server just started; from {source}"),
            Figure(f"{name}: p50", answered.p50, "ms", note=f"{runs} warm requests over HTTP"),
            Figure(f"{name}: p95", answered.p95, "ms", goal=goal),
            Figure(f"{name}: raw scan p50", raw.p50, "ms", baseline=f"{name}: p50", note="DuckDB over raw.pageviews"),
        ]
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.api", description=__doc__)
    parser.add_argument("--events", type=int, default=10_000_000, help="events in the dashboard's data set")
    parser.add_argument("--days", type=int, default=90, help="days the data set spans")
    parser.add_argument("--runs", type=int, default=20, help="timed requests per question")
    parser.add_argument("--quick", action="store_true", help="300k events and fewer runs (a smoke test)")
    args = parser.parse_args(argv)
    setup_logging()
    events = None if args.quick and args.events == 10_000_000 else args.events
    print_figures(measure(args.quick, events=events, days=args.days, runs=None if args.quick else args.runs))


if __name__ == "__main__":
    main()
