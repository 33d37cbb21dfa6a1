"""Delta sinks for the views: idempotent upserts keyed by the view's keys."""

from __future__ import annotations

from delta.tables import DeltaTable
from pyspark.sql import DataFrame

from jobs.views import ViewSpec
from tally.settings import Settings


def upsert(batch: DataFrame, spec: ViewSpec, settings: Settings) -> None:
    """MERGE a batch of view rows into the view's table, creating it on first use.

    Streaming aggregates arrive in update mode carrying absolute values, so replaying a
    micro-batch after a crash writes the same values again: the sink is idempotent.
    """
    spark = batch.sparkSession
    uri = settings.table_uri(spec.table)
    (
        DeltaTable.createIfNotExists(spark)
        .location(uri)
        .addColumns(batch.schema)
        .partitionedBy(spec.partition_by)
        .execute()
    )
    condition = " AND ".join(f"t.`{k}` = s.`{k}`" for k in spec.keys)
    (
        DeltaTable.forPath(spark, uri)
        .alias("t")
        .merge(batch.alias("s"), condition)
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )
