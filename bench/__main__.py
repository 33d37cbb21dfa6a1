"""Run the benchmarks of bench/ several times and write docs/BENCHMARKS.md: ``make bench``.

``--only NAME`` runs one benchmark (repeatable) and keeps the others' kept runs; ``--quick``
shortens every run (the file then says so). The soak runs only when named (``--only soak``,
``make bench-soak``): it takes 30 minutes (``--soak-minutes``). The backfill's floor, about
20 minutes, also runs only when named (``--only backfill-floor``). The interface a benchmark
follows is in bench/report.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import logging
import sys

from bench import (
    api,
    api_budget,
    archiver,
    backfill,
    dashboard,
    dashboard_browser,
    drilldown,
    hll,
    import_export,
    ingest,
    jvm_start,
    precision,
    sketches,
    soak,
    stack,
    traffic_merge,
    views,
    visits_operator,
)
from bench.markdown import DOCUMENT, write
from bench.report import Benchmark, load_records, run_benchmark, save_records
from tally.log import setup_logging

log = logging.getLogger("tally.bench")

PY = ".venv/bin/python -m"
BENCHMARKS = [
    Benchmark("stack", "Stack: start-up and resident memory", stack.measure, f"{PY} bench.stack"),
    Benchmark(
        "ingest",
        "Ingest: open loop, side by side with a bare endpoint, and Kafka's own limit",
        ingest.measure,
        f"{PY} bench.ingest",
        note="Open-loop load from `bench/loadgen.py` on the same 2 cores as the servers: 64 keep-alive connections,"
        " and a new one whenever all are busy (up to 1,024), so the client never holds a request back"
        " (2 uvicorn workers each). The bare endpoint (`bench/bare_app.py`) runs as ingest runs: the same uvicorn"
        " options (proxy headers off, no access log, a test holds them in step), the same GC tuning"
        " (`settle_heap`), the same body read and shared 202 response. After a 30 s warm-up of each (the"
        " broker's JIT), the two servers climb the ramp side by side, taking turns at every rate. Each step's"
        " first second is sent but not timed (the client opens the connections the rate needs); its failures"
        " still count. After every step of either server, the same 1.5 s pause; then ingest's"
        ' `tally_ingest_stored_total{store="spool"}` must not have grown: a 202 from the spool instead of Kafka'
        " fails the run. Peak = the highest step with every request 2xx and p99 < 100 ms (a step that misses is"
        " run again at once, and fails only if it misses twice in a row), refined by halving the next step 3"
        " times; latency at half of it (after the same 1 s warm-up), and the CPU time each request cost the"
        " server's workers and the broker. Then Kafka alone: `kafka-producer-perf-test` (the broker's jars) on"
        " the same, warm broker, into a topic with the settings of ingest's, ingest's own records as payload,"
        " ingest's producer settings, unthrottled; the batch endpoint's events/s is quoted as a fraction of it."
        " Before 2026-11-25 the bare endpoint ran with uvicorn's proxy-header parsing on and without ingest's"
        " tuning: ingest / bare was then 0.65× (0.63 – 0.68), with no spool check.",
    ),
    Benchmark("archiver", "Archiver: throughput and beacon -> raw latency", archiver.measure, f"{PY} bench.archiver"),
    Benchmark("views", "Streaming views: beacon -> agg.traffic_1m latency", views.measure, f"{PY} bench.views"),
    Benchmark(
        "traffic-merge",
        "The 1-minute view's MERGE over a day: closed minutes settled, side by side with one file per date",
        traffic_merge.measure,
        f"{PY} bench.traffic_merge",
        runs=1,
        note="One run: the two tables take turns at every batch in the same Spark session, so a run is its"
        " own side by side comparison; 60 batches take about 10 minutes.",
    ),
    Benchmark(
        "sketches",
        "Sketches: Tally's t-digest side by side with the tdigest package",
        sketches.measure,
        f"{PY} bench.sketches",
        note="The package is pure Python, so it gets a smaller sample; build times are compared per value.",
    ),
    Benchmark(
        "backfill",
        "Backfill: synthetic events into every view on local[2]; exact vs HLL distinct visitors",
        backfill.measure,
        f"{PY} bench.backfill",
        runs=1,
        note="One run only: generating and backfilling 14M events takes about half an hour on this machine.",
    ),
    Benchmark(
        "backfill-floor",
        "Backfill's floor: the events read alone, and with the sessions alone, side by side with every view",
        backfill.measure_floor,
        f"{PY} bench.backfill --floor",
        runs=1,
        note="One run: per size, four backfills of the same raw rows in one Spark session (local[2], the chunks"
        " of bench.backfill): every view first, then the events read and cached alone (no view written), then"
        " the events and agg.sessions alone, then every view again. The runs after the first are warm, which can"
        " only lower them. What a change to the traffic views (the minute × dimension rows, their sketches and"
        " digests) can save is at most every view minus the events and sessions alone.",
    ),
    Benchmark(
        "dashboard",
        "Dashboard: panel queries over 90 days × 10M events, side by side with raw scans",
        dashboard.measure,
        f"{PY} bench.dashboard",
        note="Both sides are timed alike: a fresh reader answers once (first read: it loads the snapshots it"
        " needs), then the same reader answers warm, 20 times per panel (p50, p95) and 5 times per raw DuckDB"
        " scan (p50). The raw scans' reader keeps raw.pageviews' snapshot in the panels' own cache"
        " (`query.aggregates.Aggregates`) and one DuckDB connection with it registered. Same data set, built"
        " once with Spark (local[2]) and kept under `.tally/bench/`; the first run builds it. Before 2026-11-25"
        " the raw scans reopened the table and DuckDB on every call: raw / panel p50 was then 17.8× (KPIs),"
        " 42.4× (time series) and 78.4× (top pages).",
    ),
    Benchmark(
        "hll",
        "HLL accuracy: the dashboard's ± over many seeds",
        hll.measure,
        f"{PY} bench.hll",
        runs=1,
        note="One run of 20 seeds per size (the share needs many samples, not many runs): per seed, synthetic"
        " events over 10 days (simulator.synthetic, as bench.backfill makes them), one sketch per day as Spark's"
        " `hll_sketch_agg` writes it (HLL_8, at `tally.sketches.HLL_LG_K`, named in the notes), read as the"
        " dashboard reads them (`tally.sketches.union_estimate`). ≈ 95% inside the 2-sigma bounds is what the ±"
        " promises. Small per-seed samples: HLL's relative error no longer depends on the count past a few"
        " times k = 2**lg_k distinct.",
    ),
    Benchmark(
        "soak",
        soak.title(),
        soak.measure,
        f"{PY} bench.soak",
        runs=1,
        note=soak.note(),
    ),
]
BENCHMARKS.append(
    Benchmark(
        "drilldown",
        "Drill-down after the archiver's commits: the range's scan extended, side by side with reading it again",
        drilldown.measure,
        f"{PY} bench.drilldown",
        note="A filtered page's first question (visitors, page views, visits, bounce rate and duration by entry"
        " page, country DE, 90 days of bench.dashboard's 1M-event data set) after 5 commits of 1,000 events to a"
        " copy of its raw.pageviews, asked twice per round in the same run, taking turns at going first: over"
        " the range's scan extended by the added files (`query.scans`), and over a new read of the range (what"
        " every new table version cost before). Then the same question again over each scan, warm. Each round"
        " checks that both answers are equal. Every other pair of rounds ends with a compaction of the last day's"
        " files (the archiver compacts every 100 commits): the scan then follows the compaction through the"
        " table's log. The additions stay under a tenth of the read, so every extension here is a layer."
        " Before this, the benchmark of the page in a browser hid the cost:"
        " its data set never changes, so its filters always found the scan of their version.",
    )
)
BENCHMARKS.append(
    Benchmark(
        "api",
        "Stats API: POST /api/v2/query over the dashboard's data set, side by side with raw scans",
        api.measure,
        f"{PY} bench.api",
        note="Each question through the API under uvicorn, over HTTP with a key: the first answer of a server"
        " just started, then 20 warm requests (p50, p95); the same question as a DuckDB scan of raw.pageviews"
        " behind a warm reader (p50). The data set is bench.dashboard's (`--dashboard-events`). The six"
        " questions of the issue: site totals of the last 30 days with the 30 before (two answers; the raw scan"
        " reads both periods at once), pages and sources (a filter on the breakdown's own dimension is answered"
        " from the aggregates), the plan property of signups (agg.props_1d), and a country filter answered"
        " exactly from raw events with visits sessionised.",
    )
)
BENCHMARKS.append(
    Benchmark(
        "api-budget",
        "Stats API under one key's heavy raw questions: a second key's latency with the raw budget, side by side"
        " with it disabled",
        api_budget.measure,
        f"{PY} bench.api_budget",
        runs=1,
        variants=api_budget.VARIANTS,
        note=api_budget.NOTE,
    )
)
BENCHMARKS.append(
    Benchmark(
        "dashboard-browser",
        "Dashboard in a browser: the page as a person waits for it, over 90 days × 10M events",
        dashboard_browser.measure,
        f"{PY} bench.dashboard_browser",
        note=dashboard_browser.NOTE,
    )
)
BENCHMARKS.append(
    Benchmark(
        "precision",
        "Precision: HLL lg_k 12 against lg_k 14, side by side",
        precision.measure,
        f"{PY} bench.precision",
        runs=2,
        variants=tuple(precision.variant(k) for k in precision.LG_KS),
        note=precision.NOTE,
    )
)
BENCHMARKS.append(
    Benchmark(
        "jvm-start",
        "Spark job start: the driver's class-data archive side by side with none",
        jvm_start.measure,
        f"{PY} bench.jvm_start",
        runs=1,
        variants=jvm_start.VARIANTS,
        note=jvm_start.NOTE,
    )
)
BENCHMARKS.append(
    Benchmark(
        "visits-operator",
        "Keeping visits in the stream: a micro-batch of each candidate operator, side by side",
        visits_operator.measure,
        f"{PY} bench.visits_operator",
        runs=1,
        variants=visits_operator.CANDIDATES,
        note=visits_operator.NOTE,
    ),
)
BENCHMARKS.append(
    Benchmark(
        "import",
        import_export.TITLE,
        import_export.measure,
        f"{PY} bench.import_export",
        runs=1,
        note=import_export.NOTE,
    )
)
BY_NAME = {b.name: b for b in BENCHMARKS}
ON_REQUEST = {"soak", "backfill-floor"}  # not part of a plain `make bench`


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--only", action="append", choices=sorted(BY_NAME), metavar="NAME", help="run only this one")
    parser.add_argument("--quick", action="store_true", help="short runs, one each: a smoke test of the harness")
    parser.add_argument("--runs", type=int, help="runs of each benchmark (default: its own, see bench/__main__.py)")
    parser.add_argument(
        "--soak-rate", type=float, help="the soak's events/s (default: half of the peak its own ramp measures)"
    )
    parser.add_argument(
        "--soak-minutes",
        type=float,
        help=f"how long the soak runs (default {soak.MINUTES:g}; its slopes are fitted over the second half)",
    )
    parser.add_argument(
        "--dashboard-events",
        type=int,
        help="events in the dashboard's data set (default 10M over 90 days; a smaller one builds sooner)",
    )
    parser.add_argument(
        "--browser-no-filter",
        action="store_true",
        help="leave out the browser bench's filter changes (a filtered 90-day page of 10M events runs out of memory)",
    )
    args = parser.parse_args(argv)
    if args.dashboard_events:
        BY_NAME["dashboard"] = dataclasses.replace(
            BY_NAME["dashboard"],
            title=f"Dashboard: panel queries over 90 days × {args.dashboard_events:,} events,"
            " side by side with raw scans",
            measure=functools.partial(dashboard.measure, events=args.dashboard_events),
            command=f"{PY} bench.dashboard --events {args.dashboard_events}",
        )
        BY_NAME["dashboard-browser"] = dataclasses.replace(
            BY_NAME["dashboard-browser"],
            title=f"Dashboard in a browser: the page as a person waits for it, over 90 days × {args.dashboard_events:,}"
            " events",
            measure=functools.partial(dashboard_browser.measure, events=args.dashboard_events),
            command=f"{PY} bench.dashboard_browser --events {args.dashboard_events}",
        )
        BY_NAME["api"] = dataclasses.replace(
            BY_NAME["api"],
            title=f"Stats API: POST /api/v2/query over 90 days × {args.dashboard_events:,} events,"
            " side by side with raw scans",
            measure=functools.partial(api.measure, events=args.dashboard_events),
            command=f"{PY} bench.api --events {args.dashboard_events}",
        )
    if args.browser_no_filter:
        browser = BY_NAME["dashboard-browser"]
        BY_NAME["dashboard-browser"] = dataclasses.replace(
            browser,
            title=browser.title + ", filter changes left out",
            measure=functools.partial(dashboard_browser.measure, events=args.dashboard_events, filters=False),
            command=browser.command + " --no-filter",
        )
    if args.soak_rate or args.soak_minutes:
        minutes = args.soak_minutes or soak.MINUTES  # for the title and note; measure picks a --quick run's own
        BY_NAME["soak"] = dataclasses.replace(
            BY_NAME["soak"],
            title=soak.title(minutes),
            measure=functools.partial(soak.measure, rate=args.soak_rate, minutes=args.soak_minutes),
            command=f"{PY} bench.soak"
            + (f" --rate {args.soak_rate:g}" if args.soak_rate else "")
            + (f" --minutes {minutes:g}" if args.soak_minutes else ""),
            note=soak.note(minutes),
        )
    setup_logging()
    chosen = args.only or [b.name for b in BENCHMARKS if b.name not in ON_REQUEST]
    records = load_records()
    order = [b.name for b in BENCHMARKS]
    failed = []
    for name in chosen:
        print(f"\n== {BY_NAME[name].title}", flush=True)
        try:
            records[name] = run_benchmark(BY_NAME[name], quick=args.quick, runs=args.runs)
        except Exception:
            log.exception(f"benchmark {name} failed; its earlier runs, if any, are kept")
            failed.append(name)
            continue
        save_records(records)
        write(records, order)
    print(f"\nwrote {DOCUMENT}" + (f"; failed: {', '.join(failed)}" if failed else ""))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
