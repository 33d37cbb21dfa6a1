"""Backfill benchmark: synthetic events -> every view, on local[2], at several sizes; and exact
COUNT(DISTINCT visitor_id) against the HLL sketches, side by side in the same run.

Each size gets its own warehouse in a temporary folder. Events are generated column by column
(traffic.synthetic) and written to raw.pageviews with delta-rs; only the backfill is timed.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import tempfile
import time
from pathlib import Path

from deltalake import write_deltalake

from bench.report import Figure, print_figures
from ops.stack import stack_env
from tally.log import setup_logging
from tally.settings import load_settings
from tally.sketches import HLL_LG_K, sketch_from_ids, union_estimate
from traffic.synthetic import synthetic_events

EVENTS_PER_VISIT = 4.4  # what traffic.synthetic produces on average
CHUNK_EVENTS = 3_000_000  # at most this many events per backfill job: what the default 1.5 GB driver holds
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


def measure(
    quick: bool = False, *, sizes: list[int] | None = None, days: int | None = None, master: str = "local[2]"
) -> list[Figure]:
    """One run: for each size, fill raw, backfill every view (timed), then exact vs HLL distinct visitors."""
    sizes = sizes or ([200_000] if quick else [1_000_000, 3_000_000, 10_000_000])
    days = days or (2 if quick else 10)
    setup_logging()
    from pyspark.sql import functions as F

    from jobs.backfill import backfill
    from jobs.spark import spark_session

    home = Path(tempfile.mkdtemp(prefix="tally-bench-backfill-"))
    os.environ.update(stack_env(home) | {"TALLY_ENV": "", "TALLY_SPARK__MASTER": master})
    figures: list[Figure] = []
    for size in sizes:
        os.environ["TALLY_WAREHOUSE__PATH"] = str(home / f"warehouse-{size}")
        settings = load_settings()
        # `tally backfill` chunks by dates; dense synthetic days get fewer per job, as an operator would set.
        chunk_days = max(1, min(settings.spark.backfill_chunk_days, CHUNK_EVENTS * days // size))
        spark_settings = dataclasses.replace(settings.spark, backfill_chunk_days=chunk_days)
        settings = dataclasses.replace(settings, spark=spark_settings)
        t0 = time.perf_counter()
        written = fill_raw(settings.table_uri("raw.pageviews"), size, days)
        print(f"{written:,} events generated and written to raw in {time.perf_counter() - t0:.0f} s", flush=True)
        # One session for every size: a stopped SparkContext cannot be restarted cleanly in-process.
        spark = spark_session(settings, "tally-bench-backfill")
        end = (START + dt.timedelta(days=days - 1)).date()
        t0 = time.perf_counter()
        backfill(spark, settings, start=START.date(), end=end, progress=False)
        seconds = time.perf_counter() - t0
        print(f"backfill of {written:,} events into every view: {seconds:.1f} s", flush=True)
        label = f"{size / 1e6:g}M events"
        goal = "≤ 180 s" if size == 10_000_000 else ""
        note = f"{written:,} events over {days} days, {master}, {chunk_days}-day chunks"
        figures.append(Figure(f"{label}: backfill into every view", seconds, "s", goal=goal, note=note))
        figures.append(Figure(f"{label}: backfill throughput", written / seconds, "events/s"))

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
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.backfill", description=__doc__)
    parser.add_argument("--sizes", default="1000000,3000000,10000000", help="event counts, comma-separated")
    parser.add_argument("--days", type=int, default=10, help="days the events span")
    parser.add_argument("--master", default="local[2]", help="Spark master for the backfill")
    parser.add_argument("--quick", action="store_true", help="one small size (a smoke test)")
    args = parser.parse_args(argv)
    sizes = None if args.quick else [int(s) for s in args.sizes.split(",")]
    print_figures(measure(args.quick, sizes=sizes, days=None if args.quick else args.days, master=args.master))


if __name__ == "__main__":
    main()
