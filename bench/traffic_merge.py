"""The 1-minute view's MERGE over a day: with the closed minutes moved to files of their own, side by side
with the date's minutes kept in one file (as before 2026-11-27).

One Spark session with the streaming views job's settings drives two copies of ``agg.traffic_1m`` in
turns (which goes first alternates every batch). Each batch is what the traffic sink writes while a
minute is open: every row of the previous minute again and half as many of the new one (``--rows`` a
minute: the (dimension, value) pairs of a busy site), persisted, through the sink's own MERGE
(``jobs.delta_sink.upsert``). After each MERGE the "settled"
copy also moves the minutes the watermark has passed apart, as the sink does
(``jobs.batch_writers.settle``); those moves are timed apart. The rows each copy's last MERGE copied
come from its Delta history. Synthetic sketches and digests (random bytes of their usual sizes): a MERGE copies them,
it does not read them.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import random
import statistics
import time
from pathlib import Path

from deltalake import DeltaTable

from bench.homes import in_temporary_home
from bench.report import Figure, print_figures
from jobs.batch_writers import settle
from jobs.delta_sink import upsert
from jobs.spark import spark_session
from jobs.streaming import views_spark_config
from quality.contracts import contracts
from tally.settings import load_settings
from tally.tables import TRAFFIC_1M, ViewSpec

DIMENSIONS = ("all", "page", "referrer", "source", "country", "region", "browser", "os", "device", "utm_source")
START = dt.datetime(2026, 3, 2, 8, 0)
EDGE = 10  # batches at each end whose MERGEs are compared


@in_temporary_home("merge")
def measure(home: Path, quick: bool = False, *, batches: int | None = None, rows: int = 1500) -> list[Figure]:
    batches = batches or (30 if quick else 60)
    os.environ.update({"TALLY_HOME": str(home), "TALLY_ENV": ""})
    settings = load_settings()
    spark = spark_session(settings, "tally-bench-traffic-merge", extra=views_spark_config(settings))
    # The table's columns as its data contract declares them (Delta type names parse as Spark DDL).
    columns = contracts(settings.quality)[TRAFFIC_1M.table].columns
    schema = ", ".join(f"{name} {kind}" for name, kind in columns.items())
    rnd = random.Random(7)

    def minute(m: int, n: int) -> list[tuple[object, ...]]:
        start = START + dt.timedelta(minutes=m)
        return [
            (
                "bench.test",
                start,
                start + dt.timedelta(minutes=1),
                DIMENSIONS[i % len(DIMENSIONS)],
                f"v{i}",
                rnd.randint(1, 50),
                0,
                rnd.randbytes(300),
                rnd.randbytes(200),
                rnd.randbytes(200),
                start.date(),
            )
            for i in range(n)
        ]

    one_file = dataclasses.replace(TRAFFIC_1M, table="bench.traffic_1m_one_file")
    settled = dataclasses.replace(TRAFFIC_1M, table="bench.traffic_1m_settled")
    merges: dict[str, list[float]] = {one_file.table: [], settled.table: []}
    moves: list[float] = []
    settled_until: dt.datetime | None = None
    try:
        for m in range(1, batches + 1):
            batch = spark.createDataFrame(minute(m - 1, rows) + minute(m, rows // 2), schema).persist()
            batch.count()
            window = ("window_start", START + dt.timedelta(minutes=m - 1), START + dt.timedelta(minutes=m))
            for spec in (one_file, settled) if m % 2 else (settled, one_file):
                began = time.monotonic()
                upsert(batch, spec, settings, dates=[START.date()], within=window)
                merges[spec.table].append(time.monotonic() - began)
                if spec is settled:
                    began = time.monotonic()
                    now_settled = settle(spark, settings, window[2], settled_until, spec=settled)
                    if now_settled != settled_until:
                        moves.append(time.monotonic() - began)
                    settled_until = now_settled
            batch.unpersist()
            print(
                f"  batch {m}/{batches}: MERGE {merges[one_file.table][-1]:.1f} s (one file),"
                f" {merges[settled.table][-1]:.1f} s (settled)",
                flush=True,
            )
    finally:
        spark.stop()

    def copied(spec: ViewSpec) -> float:
        last = DeltaTable(settings.table_uri(spec.table)).history(5)
        merge = next(c for c in last if c["operation"] == "MERGE")
        return float(merge["operationMetrics"]["numTargetRowsCopied"])

    note = f"{batches} batches of {rows + rows // 2:,} rows ({rows:,} a minute), the two tables in turns"
    first = f"traffic MERGE p50, batches 1-{EDGE}"
    last = f"traffic MERGE p50, batches {batches - EDGE + 1}-{batches}"
    return [
        Figure(f"{first}, one file per date", statistics.median(merges[one_file.table][:EDGE]), "s", note=note),
        Figure(
            f"{first}, closed minutes settled",
            statistics.median(merges[settled.table][:EDGE]),
            "s",
            baseline=f"{first}, one file per date",
        ),
        Figure(f"{last}, one file per date", statistics.median(merges[one_file.table][-EDGE:]), "s"),
        Figure(
            f"{last}, closed minutes settled",
            statistics.median(merges[settled.table][-EDGE:]),
            "s",
            baseline=f"{last}, one file per date",
        ),
        Figure("rows the last MERGE copied, one file per date", copied(one_file), "rows"),
        Figure("rows the last MERGE copied, closed minutes settled", copied(settled), "rows"),
        Figure(
            "moving closed minutes apart p50",
            statistics.median(moves) if moves else float("nan"),
            "s",
            note=f"{len(moves)} moves of 15-minute spans, after the MERGE of the batch that closed them",
        ),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.traffic_merge", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="30 batches instead of 60")
    parser.add_argument("--batches", type=int, help="batches (minutes) to write (default 60, quick 30)")
    parser.add_argument("--rows", type=int, default=1500, help="rows a minute (default 1500)")
    args = parser.parse_args(argv)
    print_figures(measure(args.quick, batches=args.batches, rows=args.rows))


if __name__ == "__main__":
    main()
