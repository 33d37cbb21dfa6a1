"""A Spark job's start with the driver's class-data archive (``tally setup`` writes it; JDK CDS),
side by side with the same job started without one (``TALLY_CLASS_ARCHIVE=off``), in the same run.

Each sample is a new Python process, as every Spark job of Tally is (a backfill, ``tally sql``,
``tally forget``, the views job): it builds the session (``jobs.spark.spark_session``), writes a
small partitioned Delta table and reads it back, then stops. Timed from the process's start to its
end, so the JVM's start-up and exit count. The two variants alternate (ABBA …), each process in a
home of its own under the run's home.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.homes import in_temporary_home
from bench.report import Figure, print_figures
from ops.bootstrap import class_archive
from tally.jvm import CLASS_ARCHIVE_ENV

WITH, WITHOUT = "class-data archive", "no archive"
VARIANTS = (WITHOUT, WITH)
PAIRS = 3  # ABBA pairs of pairs: 2 * PAIRS samples a variant
QUICK_PAIRS = 1
JOB = """
from jobs.spark import spark_session
from tally.settings import load_settings
spark = spark_session(load_settings(), "tally-bench-jvm-start")
rows = spark.range(1000).selectExpr("id", "cast(id % 7 AS string) AS site_id", "current_date() AS event_date")
rows.write.format("delta").partitionBy("event_date").mode("overwrite").save("table")
assert spark.read.format("delta").load("table").count() == 1000
spark.stop()
"""
NOTE = (
    "Each sample a new Python process running a small Spark job, as a backfill, `tally sql` or the views job"
    " starts: the session (jobs.spark.spark_session: Delta, the Kafka source on the classpath), a partitioned"
    " Delta write of 1,000 rows and a read, timed from the process's start to its end. The class-data archive"
    " is the one `tally setup` writes (JDK CDS: the driver's classes parsed and verified once, then mapped);"
    " without it, the same process with TALLY_CLASS_ARCHIVE=off. The variants alternate, ABBA."
)


def one_job(folder: Path, archive: bool) -> float:
    """Seconds one job process took, from its start to its end."""
    folder.mkdir(parents=True)
    env = {**os.environ, "TALLY_HOME": str(folder), "TALLY_SPARK__MASTER": "local[*]"}
    if not archive:
        env[CLASS_ARCHIVE_ENV] = "off"
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", JOB], cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - started
    assert done.returncode == 0, done.stderr[-2000:]
    return seconds


@in_temporary_home("jvm-start")
def measure(home: Path, quick: bool = False) -> list[Figure]:
    archive = class_archive()
    assert archive is not None, "no class-data archive could be written: see the setup log"
    order = [WITHOUT, WITH, WITH, WITHOUT] * (QUICK_PAIRS if quick else PAIRS)
    seconds: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for n, variant in enumerate(order):
        seconds[variant].append(one_job(home / f"{n}", variant == WITH))
        print(f"job {n + 1} of {len(order)} ({variant}): {seconds[variant][-1]:.1f} s", flush=True)
    figures = []
    for variant in VARIANTS:
        baseline = f"Spark job from process start to end: median ({WITHOUT})" if variant == WITH else None
        figures.append(
            Figure(
                f"Spark job from process start to end: median ({variant})",
                statistics.median(seconds[variant]) * 1000,
                "ms",
                baseline,
                note=f"{len(seconds[variant])} processes",
            )
        )
    size = archive.stat().st_size / 2**20
    figures.append(Figure("class-data archive size", size, "MiB", note=archive.name))
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.jvm_start", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"{4 * QUICK_PAIRS} processes instead of {4 * PAIRS}")
    print_figures(measure(parser.parse_args(argv).quick))


if __name__ == "__main__":
    main()
