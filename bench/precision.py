"""Precision benchmark: HLL lg_k 12 against lg_k 14, side by side in one run, on identical inputs.

Three parts, each measured for both lg_k with the same inputs and the same warm-up:

- **Error.** For each size (distinct visitor ids, the 32-hex-digit form ``simulator.synthetic``
  makes) and each of ``SEEDS`` seeds: one sketch of all the ids (a single day's sketch), and a
  union of ``UNION_DAYS`` daily sketches whose disjoint ids add up to the size (daily visitor ids
  rotate, so the days of a range never share an id: what the dashboard's 30-day range unions).
  Sketches are built as Spark's ``hll_sketch_agg`` stores them and read as the dashboard reads
  them (``tally.sketches.union_estimate``). Reported: the 95th percentile of the absolute error
  against the bound the dashboard prints (``Estimate.relative_error``, the 2-sigma half-width). Each run of a
  process draws new seeds, so the spread over runs shows how much a p95 of ``SEEDS`` samples moves.
- **Backfill.** The same synthetic events (``bench.backfill.fill_raw``), written once, copied into
  one warehouse per lg_k and backfilled into every view, each in its own process (a fresh Spark
  driver, ``TALLY_HLL_LG_K`` set) so both get the same cold start; lg_k 12 first, then 14.
  Reported: the backfill's wall time and the bytes of the parquet files of each ``agg.*`` table's
  current snapshot.
- **KPI read.** The dashboard's "KPIs (HLL union, digests)" panel (``AggregateReport.totals``)
  over each warehouse: a fresh reader each, one first read each, then warm reads taking turns
  (12, 14, 12, 14 ...), p50 and p95 as ``bench.dashboard`` reports them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import datasketches
import numpy as np

from bench.backfill import START, fill_raw
from bench.hll import Sample, inside, spark_sketch
from bench.report import Figure, print_figures
from tally.settings import Settings, load_settings
from tally.sketches import union_estimate
from tally.tables import BACKFILL_VIEWS

LG_KS = (12, 14)
SIZES = (1_000, 10_000, 100_000, 1_000_000)
SEEDS = 20
UNION_DAYS = 30
BACKFILL_EVENTS, BACKFILL_DAYS = 1_000_000, 10
KPI_READS = 40
SITE = "demo.tally.local"  # simulator.synthetic's default site, which fill_raw writes
_RUNS = itertools.count()  # each run in a process takes the next block of seeds
NOTE = (
    "Each run measures both lg_k with identical inputs, lg_k 12 first; runs repeat that pair, so load on the"
    " shared cores falls on both alike. Error: per size, one sketch of that many distinct visitor ids and a"
    f" union of {UNION_DAYS} daily sketches of disjoint ids adding up to it (daily ids rotate), built as"
    " Spark's `hll_sketch_agg` stores them (HLL_8) and read by `tally.sketches.union_estimate` as the"
    " dashboard reads them; the 95th percentile of the absolute error over the seeds against the bound the"
    " dashboard prints (2 sigma); each"
    " run draws new seeds. Backfill: bench.backfill's synthetic events written once, copied into one warehouse"
    " per lg_k, every view backfilled in a new process (`TALLY_HLL_LG_K`); bytes are the parquet files of each"
    " table's current snapshot (MiB). KPIs: the dashboard's totals panel over each warehouse's whole range,"
    " fresh readers, warm reads taking turns. 10M events at both lg_k was out of reach for the session that"
    " first ran this; bench.backfill's section has 10M at lg_k 12."
)


def variant(lg_k: int) -> str:
    """The figure-name suffix of one side, e.g. "lg_k 12"; docs/BENCHMARKS.md puts the two in columns."""
    return f"lg_k {lg_k}"


def visitor_ids(n: int, *key: int) -> list[str]:
    """``n`` random visitor ids of the 32-hex-digit form, from the generator seeded by ``key``."""
    raw = np.random.default_rng(list(key)).integers(0, 2**63, size=(n, 2), dtype=np.int64)
    return [f"{a:016x}{b:016x}" for a, b in raw]


def one_seed(size: int, seed: int, lg_ks: Sequence[int] = LG_KS) -> dict[int, tuple[Sample, Sample]]:
    """For each lg_k: (one sketch of ``size`` ids, the union of ``UNION_DAYS`` daily sketches of ``size`` ids)."""
    single = visitor_ids(size, seed, size, 0)
    days = [list(day) for day in np.array_split(np.array(visitor_ids(size, seed, size, 1)), UNION_DAYS)]
    exact_single, exact_union = len(set(single)), len(set().union(*days))
    out = {}
    for lg_k in lg_ks:
        one = Sample(union_estimate([spark_sketch(single, lg_k=lg_k)]), exact_single)
        union = Sample(union_estimate([spark_sketch(day, lg_k=lg_k) for day in days]), exact_union)
        out[lg_k] = (one, union)
    return out


def p95(values: Sequence[float]) -> float:
    """The 95th percentile as bench.dashboard takes it: the value at rank round(0.95 n)."""
    ordered = sorted(values)
    return ordered[max(0, round(0.95 * len(ordered)) - 1)]


def error_figures(samples: dict[int, list[Sample]], what: str, seeds: int) -> list[Figure]:
    """p95 of the absolute error and the bound the dashboard prints, per lg_k, for one size and kind of read."""
    figures = []
    for lg_k, group in samples.items():
        bound = statistics.median(s.estimate.relative_error * 100 for s in group)
        n_in = sum(inside(s.estimate, s.exact) for s in group)
        figures += [
            Figure(
                f"{what}: abs. error p95 ({variant(lg_k)})",
                p95([abs(s.error) * 100 for s in group]),
                "%",
                goal="≤ the bound",
                note=f"{seeds} seeds; {n_in} of {len(group)} inside their bounds",
            ),
            Figure(f"{what}: the bound shown, ± ({variant(lg_k)})", bound, "%", note="2 sigma, median over the seeds"),
        ]
    return figures


def accuracy(sizes: Sequence[int], seeds: Sequence[int]) -> list[Figure]:
    """Both lg_k, every size, single sketches and 30-day unions, over ``seeds``."""
    figures: list[Figure] = []
    for size in sizes:
        singles: dict[int, list[Sample]] = {k: [] for k in LG_KS}
        unions: dict[int, list[Sample]] = {k: [] for k in LG_KS}
        for seed in seeds:
            for lg_k, (one, union) in one_seed(size, seed).items():
                singles[lg_k].append(one)
                unions[lg_k].append(union)
        print(f"  {size:,} ids: {len(seeds)} seeds done", flush=True)
        figures += error_figures(singles, f"one sketch of {size:,} ids", len(seeds))
        figures += error_figures(unions, f"{UNION_DAYS}-day union of {size:,} ids", len(seeds))
    return figures


def table_bytes(settings: Settings, name: str) -> int:
    """Bytes of the parquet files in a Delta table's current snapshot (0 if it was never written)."""
    from tally.storage import find_table

    table = find_table(settings, name)
    return sum(os.path.getsize(uri) for uri in table.file_uris()) if table is not None else 0


def sketch_lg_k(settings: Settings) -> int:
    """lg_k of a sketch the backfill wrote to agg.traffic_1d: proof the variant ran at its own."""
    from tally.storage import open_table

    column = open_table(settings, "agg.traffic_1d").to_pyarrow_table(columns=["visitors_sketch"])["visitors_sketch"]
    first = next(raw for raw in column.to_pylist() if raw)
    return int(datasketches.hll_sketch.deserialize(bytes(first)).lg_config_k)


def backfill_in_process(warehouse: Path, lg_k: int, *, events: int, days: int, master: str) -> float:
    """Backfill every view of ``warehouse`` in a new process at ``lg_k``; its wall time in seconds."""
    env = os.environ | {"TALLY_HLL_LG_K": str(lg_k), "TALLY_WAREHOUSE__PATH": str(warehouse)}
    command = [sys.executable, "-m", "bench.precision", "--backfill-worker", "--master", master]
    command += ["--days", str(days), "--events", str(events)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"backfill at lg_k {lg_k} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["seconds"])


def backfill_worker(days: int, master: str, events: int) -> None:
    """The child of :func:`backfill_in_process`: times the backfill alone and prints it as JSON."""
    from jobs.backfill import backfill
    from jobs.spark import spark_session

    settings = load_settings()
    spark = spark_session(settings, "tally-bench-precision")
    t0 = time.perf_counter()
    backfill(spark, settings, start=START.date(), end=(START + dt.timedelta(days=days - 1)).date(), progress=False)
    seconds = time.perf_counter() - t0
    spark.stop()
    print(json.dumps({"seconds": seconds}), flush=True)


def kpi_reads(readers: dict[int, Callable[[], Any]], reads: int) -> dict[int, list[float]]:
    """Milliseconds of each reader's warm reads, taking turns; the first read of each is left out."""
    times: dict[int, list[float]] = {k: [] for k in readers}
    for i in range(reads + 1):
        for lg_k, read in readers.items():
            t0 = time.perf_counter()
            read()
            if i:
                times[lg_k].append((time.perf_counter() - t0) * 1000)
    return times


def storage_and_speed(events: int, days: int, reads: int, master: str) -> list[Figure]:
    """Backfill both warehouses from one raw table, then their storage and KPI reads."""
    from ops.stack import stack_env
    from query.aggregates import AggregateReport, Aggregates, Range

    home = Path(tempfile.mkdtemp(prefix="tally-bench-precision-"))
    os.environ.update(stack_env(home) | {"TALLY_ENV": "", "TALLY_SPARK__MASTER": master})
    template = home / "raw-only"
    os.environ["TALLY_WAREHOUSE__PATH"] = str(template)
    written = fill_raw(load_settings().table_uri("raw.pageviews"), events, days)
    figures: list[Figure] = []
    readers = {}
    span = Range(START.date(), (START + dt.timedelta(days=days - 1)).date())
    try:
        for lg_k in LG_KS:
            warehouse = home / f"warehouse-{lg_k}"
            shutil.copytree(template, warehouse)
            seconds = backfill_in_process(warehouse, lg_k, events=events, days=days, master=master)
            os.environ["TALLY_WAREHOUSE__PATH"] = str(warehouse)
            settings = load_settings()
            assert sketch_lg_k(settings) == lg_k, f"the lg_k {lg_k} backfill wrote sketches of another lg_k"
            baseline = f"backfill into every view ({variant(LG_KS[0])})" if lg_k != LG_KS[0] else None
            note = f"{written:,} events over {days} days, {master}, a new process each"
            figures.append(
                Figure(f"backfill into every view ({variant(lg_k)})", seconds, "s", baseline=baseline, note=note)
            )
            sizes = {view.table: table_bytes(settings, view.table) for view in BACKFILL_VIEWS}
            sizes["all agg.* tables"] = sum(sizes.values())
            for name, size in sizes.items():
                first = f"{name}: parquet bytes ({variant(LG_KS[0])})"
                baseline = first if lg_k != LG_KS[0] else None
                figures.append(Figure(f"{name}: parquet bytes ({variant(lg_k)})", size / 2**20, "MiB", baseline))
            readers[lg_k] = AggregateReport(Aggregates(settings), SITE, span).totals
        labels = {k: read().visitors.label() for k, read in readers.items()}
        times = kpi_reads(readers, reads)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    for lg_k, sample in times.items():
        for name, value in (("p50", statistics.median(sample)), ("p95", p95(sample))):
            first = f"KPIs (HLL union, digests): {name} ({variant(LG_KS[0])})"
            figures.append(
                Figure(
                    f"KPIs (HLL union, digests): {name} ({variant(lg_k)})",
                    value,
                    "ms",
                    baseline=first if lg_k != LG_KS[0] else None,
                    goal="≤ 300 ms" if name == "p95" else "",
                    note=f"{reads} warm reads each, in turns; {days} days: visitors {labels[lg_k]}",
                )
            )
    return figures


def measure(
    quick: bool = False,
    *,
    sizes: Sequence[int] | None = None,
    seeds: int | None = None,
    events: int | None = None,
    days: int | None = None,
    reads: int | None = None,
    master: str = "local[2]",
) -> list[Figure]:
    """One run: error over the seeds, then backfill, storage and KPI reads at each lg_k."""
    sizes = sizes or ((1_000, 10_000) if quick else SIZES)
    seeds = seeds or (3 if quick else SEEDS)
    run = next(_RUNS)
    figures = accuracy(sizes, range(run * seeds, (run + 1) * seeds))
    events, days = events or (100_000 if quick else BACKFILL_EVENTS), days or (2 if quick else BACKFILL_DAYS)
    return figures + storage_and_speed(events, days, reads or (5 if quick else KPI_READS), master)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.precision", description=__doc__)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="distinct ids, comma-separated")
    parser.add_argument("--seeds", type=int, default=SEEDS, help="seeds per size (at least 20 for a p95)")
    parser.add_argument("--events", type=int, default=BACKFILL_EVENTS, help="synthetic events to backfill")
    parser.add_argument("--days", type=int, default=BACKFILL_DAYS, help="days the events span")
    parser.add_argument("--reads", type=int, default=KPI_READS, help="warm KPI reads of each warehouse")
    parser.add_argument("--master", default="local[2]", help="Spark master for the backfills")
    parser.add_argument("--quick", action="store_true", help="small sizes, 3 seeds, 100k events (a smoke test)")
    parser.add_argument("--backfill-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    from tally.log import setup_logging

    setup_logging()
    if args.backfill_worker:
        backfill_worker(args.days, args.master, args.events)
        return
    if args.quick:
        print_figures(measure(True, master=args.master))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    figures = measure(
        sizes=sizes, seeds=args.seeds, events=args.events, days=args.days, reads=args.reads, master=args.master
    )
    print_figures(figures)


if __name__ == "__main__":
    main()
