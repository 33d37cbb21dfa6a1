"""The streaming views: Kafka ``pageviews`` -> event-time windows -> Delta agg.* tables.

Reads top to bottom: source, named steps, sink. Exactly once: Spark checkpoints the Kafka
offsets and state; the Delta sink is an idempotent MERGE of absolute values.
"""

from __future__ import annotations

import argparse
import logging

from pyspark.sql import DataFrame

from jobs.delta_sink import upsert
from jobs.views import PAGEVIEWS_1M, events_from_kafka, pageviews_per_minute
from tally.log import kv, setup_logging
from tally.settings import Settings, load_settings
from tally.spark import spark_session

log = logging.getLogger("tally.jobs.streaming")


def start(settings: Settings, *, checkpoint_root: str | None = None) -> object:
    """Start the streaming query and return it (a ``StreamingQuery``)."""
    spark = spark_session(settings, "tally-views")
    k, s = settings.kafka, settings.spark
    kafka_rows = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", k.servers)
        .option("subscribe", k.pageviews_topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "false")
        .load()
    )
    events = (
        events_from_kafka(kafka_rows).withWatermark("event_ts", s.watermark).dropDuplicatesWithinWatermark(["event_id"])
    )
    per_minute = pageviews_per_minute(events)

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        upsert(batch, PAGEVIEWS_1M, settings)
        log.info("view batch written", extra=kv(view=PAGEVIEWS_1M.table, batch_id=batch_id))

    checkpoints = checkpoint_root or str(settings.home_dir / "checkpoints")
    return (
        per_minute.writeStream.outputMode("update")
        .foreachBatch(write_batch)
        .option("checkpointLocation", f"{checkpoints}/{PAGEVIEWS_1M.table}")
        .trigger(processingTime=f"{s.trigger_seconds} seconds")
        .queryName(PAGEVIEWS_1M.table)
        .start()
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m jobs.streaming", description="Run Tally's streaming views (Kafka -> Delta agg.*)."
    )
    parser.parse_args(argv)
    setup_logging()
    settings = load_settings()
    query = start(settings)
    log.info("streaming views started", extra=kv(master=settings.spark.master, kafka=settings.kafka.servers))
    query.awaitTermination()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
