"""Backfill benchmark: synthetic events -> every view, on local[2], at several sizes; and exact
COUNT(DISTINCT visitor_id) against the HLL sketches, side by side in the same run.

Each size gets its own warehouse in the run's home (bench/homes.py), removed once the size is
measured (about 2 GB at 10M events). Events are generated column by column (simulator.synthetic)
and written to raw.pageviews with delta-rs; only the backfill is timed.

Beside it, in the same run, the baseline a single-machine user would pick instead: DuckDB given
the same raw rows computes the minute × dimension rows (page views, custom events, approximate
distinct visitors, engagement and load quantiles) and the 30-minute-gap visits. It returns
numbers, not mergeable sketches, and writes nothing, so it is a lower bound, not the same work.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
from deltalake import DeltaTable, write_deltalake

from bench.homes import in_temporary_home
from bench.report import Figure, print_figures
from ops.stack import stack_env
from simulator.synthetic import synthetic_events
from tally.dimensions import ALL, EVENT, TRAFFIC_DIMENSIONS
from tally.log import setup_logging
from tally.settings import Settings, load_settings
from tally.sketches import HLL_LG_K, sketch_from_ids, union_estimate
from tally.tables import BACKFILL_VIEWS, SESSIONS, ViewSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

EVENTS_PER_VISIT = 4.4  # what simulator.synthetic produces on average
START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
# The composite estimator's standard error, 1.04 / sqrt(2**lg_k): what the dashboard's ± is twice of.
ONE_SIGMA = f"1 sigma ≈ {104 / 2 ** (HLL_LG_K / 2):.1f}% (lg_k {HLL_LG_K})"


def fill_raw(uri: str, events: int, days: int) -> int:
    """Write about ``events`` synthetic events over ``days`` days; returns the exact count."""
    written, per_day = 0, int(events / EVENTS_PER_VISIT / days)
    for day in range(days):
        table = synthetic_events(
            visits=per_day,
            start=START + dt.timedelta(days=day),
            span=dt.timedelta(days=1),
            seed=day,
            visitors=per_day // 3,
        )
        write_deltalake(uri, table, mode="append", partition_by=["event_date"])
        written += table.num_rows
    return written


RAW_COLUMNS = sorted(
    {
        "site_id",
        "visitor_id",
        "type",
        "name",
        "event_time",
        "is_bot",
        "engagement_ms",
        "load_ms",
        *TRAFFIC_DIMENSIONS.values(),
    }
)


def duckdb_baseline(uri: str, threads: int) -> dict[str, float]:
    """Seconds DuckDB takes to load raw's columns, compute the minute × dimension rows, and the visits.

    As the views do, it takes engagement and load quantiles for the site total's rows only.
    """
    con = duckdb.connect(config={"threads": threads})
    con.execute("SET enable_progress_bar = false")
    t0 = time.perf_counter()
    events = DeltaTable(uri).to_pyarrow_dataset().to_table(columns=RAW_COLUMNS)  # noqa: F841 (read by DuckDB)
    con.execute(
        "CREATE TABLE events AS SELECT *, make_timestamp(event_time * 1000) AS ts FROM events "
        "WHERE NOT coalesce(is_bot, false)"
    )
    load = time.perf_counter() - t0
    pairs = [f"{{'d': '{ALL}', 'v': ''}}"]
    pairs += [f"{{'d': '{n}', 'v': coalesce(CAST({c} AS VARCHAR), '(none)')}}" for n, c in TRAFFIC_DIMENSIONS.items()]
    pairs.append(f"CASE WHEN type = 'event' THEN {{'d': '{EVENT}', 'v': coalesce(name, '(none)')}} END")
    t0 = time.perf_counter()
    con.execute(f"""
        CREATE TABLE minutes AS
        WITH exploded AS (
            SELECT site_id, time_bucket(INTERVAL 1 MINUTE, ts) AS minute, visitor_id, type, engagement_ms, load_ms,
                   unnest(list_filter([{", ".join(pairs)}], x -> x IS NOT NULL)) AS dim
            FROM events)
        SELECT site_id, minute, dim.d AS dimension, dim.v AS value,
               count(*) FILTER (WHERE type = 'pageview') AS pageviews,
               count(*) FILTER (WHERE type = 'event') AS events,
               approx_count_distinct(visitor_id) AS visitors,
               approx_quantile(engagement_ms, [0.5, 0.75, 0.95])
                   FILTER (WHERE type = 'engagement' AND dim.d = '{ALL}') AS engagement,
               approx_quantile(load_ms, [0.5, 0.75, 0.95]) FILTER (WHERE type = 'pageview' AND dim.d = '{ALL}') AS load
        FROM exploded GROUP BY ALL""")
    minutes = time.perf_counter() - t0
    t0 = time.perf_counter()
    con.execute("""
        CREATE TABLE visits AS
        WITH gaps AS (
            SELECT site_id, visitor_id, ts, type,
                   coalesce(ts - lag(ts) OVER (PARTITION BY site_id, visitor_id ORDER BY ts) > INTERVAL 30 MINUTE,
                            true) AS starts
            FROM events),
        numbered AS (
            SELECT *, sum(starts::INT) OVER (PARTITION BY site_id, visitor_id ORDER BY ts) AS visit FROM gaps)
        SELECT site_id, visitor_id, visit, min(ts) AS started, max(ts) AS ended,
               count(*) FILTER (WHERE type = 'pageview') AS pageviews
        FROM numbered GROUP BY ALL""")
    visits = time.perf_counter() - t0
    con.close()
    return {"load": load, "minutes": minutes, "visits": visits}


def _filled(home: Path, size: int, days: int, master: str) -> tuple[Settings, int]:
    """Settings for a warehouse of its own for ``size`` in ``home``, with about ``size`` synthetic events
    over ``days`` days written to its raw.pageviews: (settings, events written)."""
    os.environ.update(stack_env(home) | {"TALLY_ENV": "", "TALLY_SPARK__MASTER": master})
    os.environ["TALLY_WAREHOUSE__PATH"] = str(home / f"warehouse-{size}")
    settings = load_settings()
    t0 = time.perf_counter()
    written = fill_raw(settings.table_uri("raw.pageviews"), size, days)
    print(f"{written:,} events generated and written to raw in {time.perf_counter() - t0:.0f} s", flush=True)
    return settings, written


def _last_day(days: int) -> dt.date:
    """The last date of the ``days`` days of events from START."""
    return (START + dt.timedelta(days=days - 1)).date()


def _jobs_note(spark: SparkSession, settings: Settings, written: int, days: int, master: str) -> str:
    """How the backfill splits the run's events into Spark jobs, as its own plan does."""
    from jobs.backfill_chunks import chunk_events, plan_chunks

    budget = chunk_events(spark, settings)
    jobs = plan_chunks(settings, START.date(), _last_day(days), budget)
    heap = spark.sparkContext.getConf().get("spark.driver.memory")
    return (
        f"{written:,} events over {days} days, {master}, {heap} driver heap: {len(jobs)} job(s) of at most"
        f" {budget:,} events"
    )


def _timed_backfill(spark: SparkSession, settings: Settings, days: int, views: Sequence[ViewSpec]) -> float:
    """Seconds a backfill of ``views`` over the ``days`` days from START takes."""
    from jobs.backfill import backfill

    t0 = time.perf_counter()
    backfill(spark, settings, start=START.date(), end=_last_day(days), progress=False, views=views)
    return time.perf_counter() - t0


# Issue 65's decision: the 1M-event goal of 30 s is withdrawn (Spark's warm floor on 2 cores was 46 s);
# a backfill of every view is held to its ratio against the DuckDB baseline of the same run.
GOALS = {10_000_000: "≤ 6× the DuckDB baseline"}


@in_temporary_home("backfill")
def measure(
    home: Path,
    quick: bool = False,
    *,
    sizes: list[int] | None = None,
    days: int | None = None,
    master: str = "local[2]",
) -> list[Figure]:
    """One run: for each size, fill raw, backfill every view (timed), then exact vs HLL distinct visitors."""
    sizes = sizes or ([200_000] if quick else [1_000_000, 3_000_000, 10_000_000])
    days = days or (2 if quick else 10)
    setup_logging()
    from pyspark.sql import functions as F

    from jobs.spark import local_cores, spark_session

    figures: list[Figure] = []
    for size in sizes:
        settings, written = _filled(home, size, days, master)
        # One session for every size: a stopped SparkContext cannot be restarted cleanly in-process.
        spark = spark_session(settings, "tally-bench-backfill")
        seconds = _timed_backfill(spark, settings, days, BACKFILL_VIEWS)
        print(f"backfill of {written:,} events into every view: {seconds:.1f} s", flush=True)
        label = f"{size / 1e6:g}M events"
        goal = GOALS.get(size, "")
        note = _jobs_note(spark, settings, written, days, master)
        end = _last_day(days)
        threads = local_cores(master) or os.cpu_count() or 1
        duck = duckdb_baseline(settings.table_uri("raw.pageviews"), threads)
        duck_name = f"{label}: DuckDB baseline, minute × dimension rows and visits, load included"
        figures += [
            Figure(f"{label}: backfill into every view", seconds, "s", baseline=duck_name, goal=goal, note=note),
            Figure(f"{label}: backfill throughput", written / seconds, "events/s"),
            Figure(
                duck_name,
                sum(duck.values()),
                "s",
                note=f"{threads} threads: load {duck['load']:.1f} s, minute rows {duck['minutes']:.1f} s,"
                f" visits {duck['visits']:.1f} s; numbers, not mergeable sketches: a lower bound",
            ),
        ]

        # Distinct visitors per day: exact from raw vs the HLL sketches of agg.traffic_1d.
        raw = spark.read.format("delta").load(settings.table_uri("raw.pageviews")).where(~F.col("is_bot"))
        t0 = time.perf_counter()
        exact: dict[dt.date, int] = dict(raw.groupBy("event_date").agg(F.countDistinct("visitor_id")).collect())
        exact_s = time.perf_counter() - t0
        days_view = spark.read.format("delta").load(settings.table_uri("agg.traffic_1d")).where("dimension = 'all'")
        t0 = time.perf_counter()
        sketches = {
            r["event_date"]: r["visitors_sketch"] for r in days_view.select("event_date", "visitors_sketch").collect()
        }
        estimates = {d: union_estimate([s]) for d, s in sketches.items()}
        hll_s = time.perf_counter() - t0
        exact = {d: n for d, n in exact.items() if d in estimates}  # raw also holds visits running past the range
        errors = sorted(abs(estimates[d].value - exact[d]) / exact[d] for d in exact)
        within = sum(1 for d in exact if estimates[d].lower <= exact[d] <= estimates[d].upper)
        exact_name = f"{label}: distinct visitors per day, exact COUNT(DISTINCT) on raw"
        figures += [
            Figure(exact_name, exact_s, "s"),
            Figure(f"{label}: the same from the HLL sketches of agg.traffic_1d", hll_s, "s", baseline=exact_name),
            Figure(f"{label}: HLL error per day, median", errors[len(errors) // 2] * 100, "%"),
            Figure(f"{label}: HLL error per day, max", errors[-1] * 100, "%", note=ONE_SIGMA),
            Figure(
                f"{label}: days inside the 2-sigma bounds",
                within / len(exact) * 100,
                "%",
                note="≈ 95% expected at 2 sigma: with 10 days, one outside is no surprise",
            ),
        ]
        whole = union_estimate(sketches.values())
        in_range = raw.where(F.col("event_date") <= F.lit(end))
        total_exact = in_range.select(F.countDistinct("visitor_id")).first()[0]  # type: ignore[index]
        error = abs(whole.value - total_exact) / total_exact * 100
        figures.append(Figure(f"{label}: HLL union over all days, error", error, "%", note=f"{whole.label()}"))
        # The Python library, fed the exact distinct ids, must estimate what Spark's sketches say:
        # then any error is HLL's own, not the pipeline's.
        ids = [r[0] for r in in_range.select("visitor_id").distinct().collect()]
        python = union_estimate([sketch_from_ids(ids)]).value
        figures.append(
            Figure(
                f"{label}: the same union by the Python library over the exact ids, difference",
                abs(python - whole.value),
                "visitors",
                goal="0",
                note=f"{len(ids):,} distinct ids; Spark's union {whole.value:,.0f}, Python's {python:,.0f}",
            )
        )
        shutil.rmtree(home / f"warehouse-{size}")  # 2 GB at 10M events; the next size has its own
    return figures


FLOOR_SIZES = [1_000_000, 10_000_000]


@in_temporary_home("backfill-floor")
def measure_floor(
    home: Path,
    quick: bool = False,
    *,
    sizes: list[int] | None = None,
    days: int | None = None,
    master: str = "local[2]",
) -> list[Figure]:
    """One run: for each size, fill raw, then four backfills in one Spark session, timed: every view;
    reading the events alone (each chunk's events read and cached, no view written); reading them
    plus agg.sessions (the work a backfill does before any traffic view: its floor); and every view
    again, which shows what the first one spent warming the JVM up.

    Every view goes first, so the first size's JVM warms up in it, as in ``measure``; the floors
    after it run warm, which can only make them lower.
    """
    sizes = sizes or ([200_000] if quick else FLOOR_SIZES)
    days = days or (2 if quick else 10)
    setup_logging()
    from jobs.spark import spark_session

    figures: list[Figure] = []
    for size in sizes:
        settings, written = _filled(home, size, days, master)
        spark = spark_session(settings, "tally-bench-backfill-floor")
        label = f"{size / 1e6:g}M events"
        every = f"{label}: backfill into every view"
        runs = [
            (every, BACKFILL_VIEWS, GOALS.get(size, "")),
            (f"{label}: reading the events alone, no view written", (), ""),
            (f"{label}: reading the events and {SESSIONS.table} alone", (SESSIONS,), ""),
            (f"{label}: every view again, in the same warm JVM", BACKFILL_VIEWS, ""),
        ]
        for name, views, goal in runs:
            seconds = _timed_backfill(spark, settings, days, views)
            print(f"{name}: {seconds:.1f} s", flush=True)
            note = _jobs_note(spark, settings, written, days, master) if name == every else ""
            figures.append(Figure(name, seconds, "s", baseline=None if name == every else every, goal=goal, note=note))
        shutil.rmtree(home / f"warehouse-{size}")
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.backfill", description=__doc__)
    parser.add_argument("--sizes", help="event counts, comma-separated (default 1000000,3000000,10000000)")
    parser.add_argument("--days", type=int, default=10, help="days the events span")
    parser.add_argument("--master", default="local[2]", help="Spark master for the backfill")
    parser.add_argument("--quick", action="store_true", help="one small size (a smoke test)")
    parser.add_argument(
        "--floor",
        action="store_true",
        help="time every view beside the events read alone and with the sessions alone (sizes default to 1M, 10M)",
    )
    args = parser.parse_args(argv)
    sizes = None if args.quick or args.sizes is None else [int(s) for s in args.sizes.split(",")]
    run = measure_floor if args.floor else measure
    print_figures(run(args.quick, sizes=sizes, days=None if args.quick else args.days, master=args.master))


if __name__ == "__main__":
    main()
