"""The one SparkSession factory: master from config, Delta and the Kafka source on the classpath."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from tally.bootstrap import check_java, spark_jars
from tally.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def spark_session(settings: Settings, app_name: str) -> SparkSession:
    """Build (or return the running) SparkSession for a Tally job.

    Small-machine defaults: the UI off, few shuffle partitions, Delta snapshot state in few
    partitions. ``spark.master`` comes from config, so the same job runs on ``local[*]`` or a
    cluster without code changes.
    """
    from pyspark.sql import SparkSession

    check_java()
    # Workers must run the same Python as the driver (the project's venv).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    s = settings.spark
    local_dir = settings.home_dir / "spark" / "tmp"
    local_dir.mkdir(parents=True, exist_ok=True)
    builder = (
        SparkSession.builder.appName(app_name)
        .master(s.master)
        .config("spark.driver.memory", s.driver_memory)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.jars", ",".join(spark_jars()))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.shuffle.partitions", str(s.shuffle_partitions))
        .config("spark.databricks.delta.snapshotPartitions", str(s.shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.local.dir", str(local_dir))
        .config("spark.sql.warehouse.dir", str(settings.home_dir / "spark" / "sql-warehouse"))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={local_dir}")
    )
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
