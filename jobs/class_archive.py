"""Write the Spark driver JVM's class-data archive (``tally.jvm.spark_class_archive``): run what a
Tally job runs first (a session with Delta, a partitioned write, a read, an aggregate, a merge) in a
JVM that dumps the classes it loaded to ``PATH`` when it exits.

``tally setup`` runs it once per JDK and set of jars, in a temporary home, and moves the archive
into place only once this process (and so its JVM) has ended; nothing else should call it.

    python -m jobs.class_archive PATH
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from jobs.spark import spark_session
from tally.settings import load_settings

EXIT_WAIT_S = 300  # for the JVM to write the archive (about 190 MB) and exit


def exercise(path: Path) -> None:
    """A Spark session that loads the classes of a backfill's first steps, dumping them at exit to ``path``."""
    settings = load_settings()
    options = f"{settings.spark.java_options} -XX:ArchiveClassesAtExit={path}".strip()
    spark = spark_session(settings, "tally-class-archive", extra={"spark.driver.extraJavaOptions": options})
    with tempfile.TemporaryDirectory(prefix="tally-class-archive-") as folder:
        table = f"{folder}/events"
        rows = spark.range(200).selectExpr("id", "cast(id % 7 AS string) AS site_id", "current_date() AS event_date")
        rows.write.format("delta").partitionBy("event_date").mode("overwrite").save(table)
        counted = spark.read.format("delta").load(table).groupBy("site_id").count().collect()
        assert len(counted) == 7, counted
        rows.createOrReplaceTempView("updates")
        spark.sql(f"MERGE INTO delta.`{table}` t USING updates u ON t.id = u.id WHEN MATCHED THEN UPDATE SET *")
    gateway = spark.sparkContext._gateway
    assert gateway is not None, "a local session has a gateway"
    jvm = gateway.proc  # pyspark's Popen of the driver JVM
    spark.stop()
    # The JVM exits when its stdin closes (pyspark's gateway server), and writes the archive as it
    # exits: wait for it, so that the archive is whole when this process ends.
    jvm.stdin.close()
    code = jvm.wait(timeout=EXIT_WAIT_S)
    if code != 0:
        raise SystemExit(f"the driver JVM exited with {code}; no archive")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m jobs.class_archive", description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path, help="the archive to write when the JVM exits")
    exercise(parser.parse_args(argv).path)


if __name__ == "__main__":
    main()
