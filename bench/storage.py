"""Storage per million events of agg.events, beside raw.pageviews, agg.sessions and agg.traffic_1m:
the simulator's events of 7 days (about 1M) written to raw.pageviews, then one ``backfill`` of every
view, in a home of its own; each table's Parquet bytes divided by the events.

Run: ``.venv/bin/python -m bench.storage`` (about 3 minutes on 2 cores). Not yet one of ``python -m
bench``'s benchmarks: its figures are quoted in docs/EVENTS-AND-VISITS-PLAN.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import time
from pathlib import Path

from bench.homes import in_temporary_home
from bench.report import Figure, print_figures

VISITS = 227_000  # about 1M events at 4.4 events a visit
TABLES = ("raw.pageviews", "agg.events", "agg.sessions", "agg.traffic_1m")


@in_temporary_home("storage")
def measure(home: Path, quick: bool = False) -> list[Figure]:
    from deltalake import write_deltalake

    from jobs.backfill import backfill
    from jobs.spark import spark_session
    from simulator.synthetic import synthetic_events
    from tally.settings import load_settings

    settings = load_settings()
    settings = dataclasses.replace(
        settings, home=str(home), warehouse=dataclasses.replace(settings.warehouse, path=str(home / "warehouse"))
    )
    start = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    events = synthetic_events(visits=VISITS // (10 if quick else 1), start=start, span=dt.timedelta(days=7), seed=5)
    write_deltalake(settings.table_uri("raw.pageviews"), events, mode="append", partition_by=["event_date"])
    spark = spark_session(settings, "tally-bench-storage")
    began = time.monotonic()
    try:
        backfill(spark, settings, start=start.date(), end=(start + dt.timedelta(days=7)).date(), progress=False)
    finally:
        spark.stop()
    seconds = time.monotonic() - began
    figures = [Figure("events", events.num_rows, "events"), Figure("backfill of every view", seconds * 1000, "ms")]
    for table in TABLES:
        folder = Path(settings.table_uri(table).removeprefix("file://"))
        size = sum(f.stat().st_size for f in folder.rglob("*.parquet"))
        figures.append(Figure(f"{table} per 1M events", size / 2**20 * 1e6 / events.num_rows, "MiB"))
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.storage", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the events")
    print_figures(measure(parser.parse_args(argv).quick))


if __name__ == "__main__":
    main()
