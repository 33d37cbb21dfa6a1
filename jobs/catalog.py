"""Register the warehouse's Delta tables in a Spark session, so SQL can say ``raw.pageviews``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from jobs.delta_sink import table_exists
from tally.settings import Settings
from tally.tables import ALL_TABLES

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TABLES = ALL_TABLES


def register_tables(spark: SparkSession, settings: Settings) -> list[str]:
    """Create ``raw``/``agg`` databases and external Delta tables over the warehouse paths."""
    registered = []
    for name in TABLES:
        uri = settings.table_uri(name)
        written = table_exists(spark, uri) if "://" in uri else (Path(uri) / "_delta_log").exists()
        if not written:
            continue  # not written yet (a location without a Delta log cannot be registered)
        schema = name.split(".")[0]
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {schema}")
        spark.sql(f"CREATE TABLE IF NOT EXISTS {name} USING DELTA LOCATION '{uri}'")
        registered.append(name)
    return registered
