"""The streaming views: Kafka ``pageviews`` -> event-time windows -> Delta ``agg.*`` tables.

Five queries, each reading top to bottom (source, named steps, sink):
- traffic: 1-minute windows (update mode); the minutes it touches are rolled up into hours,
  days and 5-minute hopping windows by the main thread (``jobs/rollups.py``);
- sessions: session windows, appended once closed with their events (``agg.sessions``,
  ``agg.events``), then the visits rollups they touch;
- rate limit: hourly page views per client, publishing blocks to ``ratelimit.blocks``;
- props: custom event properties per day (update mode), ``agg.props_1d``;
- vitals: Core Web Vitals and scroll depth per hour (update mode), ``agg.vitals_1h``.

Exactly once: Spark checkpoints Kafka offsets and window state; every sink is a MERGE of
absolute values, so a replayed micro-batch writes the same rows again.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import start_http_server
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from jobs import props, ratelimit, sessions, traffic, vitals
from jobs.batch_writers import BatchWriter, write_props, write_ratelimit, write_sessions, write_traffic, write_vitals
from jobs.late import LateEventsListener
from jobs.rollup_journal import PendingJournal
from jobs.rollups import ViewRollups
from jobs.spark import spark_session
from jobs.views import events_from_kafka
from tally.log import kv, setup_logging
from tally.settings import Settings, load_settings
from tally.site_registry import SiteRegistry
from tally.spans import spark_interval
from topics.follower import TopicFollower
from topics.sites import follow_sites

log = logging.getLogger("tally.jobs.streaming")

# Spark runs the jobs of the five queries and of the roll-ups first come, first served, so a
# batch of the 1-minute view (what "realtime" shows) could queue behind a roll-up's MERGE. With
# fair scheduling, the traffic query's pool gets most of the cores whenever it has work.
LATENCY_POOL, BACKGROUND_POOL = "views-latency", "views-background"
_POOL_WEIGHTS = {LATENCY_POOL: 4, BACKGROUND_POOL: 1}


def scheduler_pools(settings: Settings) -> dict[str, str]:
    """Spark settings for fair scheduling between the latency pool and the background pool."""
    pools = "".join(
        f'<pool name="{name}"><schedulingMode>FIFO</schedulingMode><weight>{weight}</weight>'
        f"<minShare>{1 if name == LATENCY_POOL else 0}</minShare></pool>"
        for name, weight in _POOL_WEIGHTS.items()
    )
    path = settings.home_dir / "spark" / "fairscheduler.xml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'<?xml version="1.0"?>\n<allocations>{pools}</allocations>\n')
    return {"spark.scheduler.mode": "FAIR", "spark.scheduler.allocation.file": str(path)}


ROCKSDB_STATE_STORE = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


# Spark keeps the status of finished jobs, stages, tasks and SQL executions (with each plan's
# graph, metrics and text) for its UI, which is off here, and its status API: 1,000 of each
# (100,000 tasks) by default. In a job that never ends that store only fills: in a 14-minute soak
# at 500 events/s (and the catch-up after it) it reached 829 SQL executions and about 1,000 stages
# (docs/OPERATIONS.md, "Memory"). Nothing reads them but a person debugging, who sees the last few.
STATUS_RETENTION = {
    "spark.ui.retainedJobs": "50",
    "spark.ui.retainedStages": "50",
    "spark.ui.retainedTasks": "500",
    "spark.sql.ui.retainedExecutions": "20",
    "spark.ui.dagGraph.retainedRootRDDs": "50",
}


def views_spark_config(settings: Settings) -> dict[str, str]:
    """The streaming job's own Spark settings: its scheduler pools, its heap (``spark.views_driver_memory``,
    smaller than the batch jobs' ``spark.driver_memory``) and its JVM options (``spark.views_java_options``):
    see docs/OPERATIONS.md, "Memory"."""
    s = settings.spark
    return scheduler_pools(settings) | {
        "spark.driver.memory": s.views_driver_memory,
        "spark.driver.extraJavaOptions": s.views_java_options,
        # A micro-batch's plan carries literals of its own (its minutes, its dates), so whole-stage
        # code generation compiles new classes for every batch, of a few thousand rows: compile
        # time the batch does not win back.
        "spark.sql.codegen.wholeStage": "false",
        # The window and deduplication state in RocksDB, off the heap, in memory bounded for all
        # queries together; each batch writes only its changes to the checkpoint. A checkpoint
        # started on the default (heap) store keeps it: Spark records the provider in it.
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_STATE_STORE,
        "spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage": "true",
        "spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB": "192",
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        # Tables this job creates write a Delta checkpoint every 50 commits, not every 10: a checkpoint
        # made every 10th traffic MERGE the slowest of them.
        "spark.databricks.delta.properties.defaults.checkpointInterval": "50",
        **STATUS_RETENTION,
        # The serial collector collects the old generation only once it is full, so the committed
        # heap climbs towards its maximum with garbage while the live set stays near 0.2 GiB. Spark's
        # context cleaner asks for a full collection this often (30 min by default); after one, the
        # collector gives back what is more than MaxHeapFreeRatio free.
        "spark.cleaner.periodicGC.interval": f"{s.views_gc_seconds:g}s",
    }


def in_pool(pool: str, writer: BatchWriter, *, persist: bool = True) -> BatchWriter:
    """A query's batch writer running its Spark jobs in ``pool``.

    ``persist``: compute the micro-batch once for the writer's several reads of it (its range,
    its MERGE, its blocks), instead of once per read.
    """

    def write(batch: DataFrame, batch_id: int) -> None:
        # foreachBatch calls back on a thread of its own: the pool is set where the jobs start.
        batch.sparkSession.sparkContext.setLocalProperty("spark.scheduler.pool", pool)
        if not persist:
            writer(batch, batch_id)
            return
        batch.persist()
        try:
            writer(batch, batch_id)
        finally:
            batch.unpersist()

    return write


# The view queries, in the order ``start`` begins them.
QUERY_NAMES = ("traffic", "sessions", "ratelimit", "props", "vitals")
# Queries on the longer trigger: sessions writes only closed visits, and neither a day's property
# breakdown nor an hour's p75 of the vitals need be seconds fresh.
SLOW_QUERIES = frozenset({"sessions", "props", "vitals"})


def trigger_seconds(settings: Settings, query: str) -> int:
    """A query's micro-batch interval: the sessions, props and vitals queries run less often and leave
    the cores to the 1-minute view (``spark.sessions_trigger_seconds``), the rate-limit counters on
    their own (``spark.ratelimit_trigger_seconds``)."""
    s = settings.spark
    if query == "ratelimit":
        return s.ratelimit_trigger_seconds
    return s.sessions_trigger_seconds if query in SLOW_QUERIES else s.trigger_seconds


def kafka_events(
    spark: SparkSession, settings: Settings, *, only: Callable[[DataFrame], DataFrame] | None = None
) -> DataFrame:
    """The event stream: decoded, watermarked on event time, duplicates (same event_id) dropped.

    ``only`` narrows the events before the deduplication, for a query that reads a few kinds of
    event (vitals beacons, custom events with properties): its dedup state then holds those ids
    alone, not every event's. A duplicate is the same event, so it is kept or dropped with it.
    """
    k = settings.kafka
    rows = (
        spark.readStream.format("kafka")
        .options(**k.spark_options())
        .option("subscribe", k.pageviews_topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "false")
        .load()
    )
    events = events_from_kafka(rows)
    if only is not None:
        events = only(events)
    return events.withWatermark("event_ts", spark_interval(settings.spark.watermark)).dropDuplicatesWithinWatermark(
        ["event_id"]
    )


@dataclass
class ViewJob:
    """The running view queries of one Spark session, and the late-events listener they report to."""

    spark: SparkSession
    settings: Settings
    queries: list[Any] = field(default_factory=list)
    late: LateEventsListener = field(default_factory=LateEventsListener)
    rollups: ViewRollups | None = None
    sites_follower: TopicFollower | None = None  # keeps the rate-limit view's sites current

    def process_all_available(self) -> None:
        """Block until every query has processed all data available now, then roll up (tests, benches)."""
        for query in self.queries:
            query.processAllAvailable()
        self.housekeeping(force=True)

    def housekeeping(self, *, force: bool = False) -> None:
        """Record late-event figures; roll up minutes the traffic query left pending."""
        self.late.flush(self.spark, self.settings)
        if self.rollups is not None:
            self.rollups.run_if_due(self.spark, force=force)

    def stop(self) -> None:
        for query in self.queries:
            query.stop()
        self.spark.streams.removeListener(self.late)
        if self.sites_follower is not None:
            self.sites_follower.close()


def default_checkpoints(settings: Settings) -> str:
    """Where the queries keep offsets and state: beside the tables when those are on object storage
    (executors on other machines write state there too), else under the local home."""
    if settings.warehouse.on_object_store:
        return f"{settings.warehouse_uri.rstrip('/')}/_checkpoints"
    return str(settings.home_dir / "checkpoints")


def start(settings: Settings, *, checkpoint_root: str | None = None, queries: Collection[str] | None = None) -> ViewJob:
    """Start the view queries (traffic, sessions, rate limit, props, vitals), or only the named ``queries``
    (a test of one view), and return them."""
    spark = spark_session(settings, "tally-views", extra=views_spark_config(settings))
    checkpoints = checkpoint_root or default_checkpoints(settings)
    rollups = ViewRollups(settings, journal=lambda name: PendingJournal(spark, f"{checkpoints.rstrip('/')}/{name}"))
    lag_limit = dt.timedelta(minutes=settings.alerts.lag_minutes)
    job = ViewJob(spark, settings, rollups=rollups, late=LateEventsListener(lag_limit=lag_limit))
    assert job.rollups is not None
    job.rollups.recover(spark)
    spark.streams.addListener(job.late)
    gap = settings.spark.session_gap
    # The sites configured now (tally site add/change included): the rate-limit view's limits.
    sites = SiteRegistry(seed=settings.sites)
    if queries is None or "ratelimit" in queries:
        job.sites_follower = follow_sites(settings.kafka, sites, reader="views")
    plans: list[tuple[str, DataFrame, str, BatchWriter]] = [  # name, rows, output mode, writer
        (
            "traffic",
            traffic.traffic_minutes(kafka_events(spark, settings)),
            "update",
            in_pool(LATENCY_POOL, write_traffic(settings, job.rollups), persist=False),  # it persists its digests
        ),
        (
            "sessions",
            sessions.sessions(kafka_events(spark, settings), gap),
            "append",
            in_pool(BACKGROUND_POOL, write_sessions(settings)),
        ),
        (
            "ratelimit",
            ratelimit.ratelimit_counts(kafka_events(spark, settings)),
            "update",
            in_pool(BACKGROUND_POOL, write_ratelimit(settings, sites)),
        ),
        (
            "props",
            props.props_days(kafka_events(spark, settings, only=props.with_properties)),
            "update",
            in_pool(BACKGROUND_POOL, write_props(settings)),
        ),
        (
            "vitals",
            vitals.vitals_hours(kafka_events(spark, settings, only=vitals.vitals_beacons)),
            "update",
            in_pool(BACKGROUND_POOL, write_vitals(settings), persist=False),  # it persists its digests
        ),
    ]
    context = spark.sparkContext
    assert [plan[0] for plan in plans] == list(QUERY_NAMES)
    unknown = set(queries or ()) - set(QUERY_NAMES)
    assert not unknown, f"no view queries named {sorted(unknown)}"
    for name, rows, mode, writer in plans:
        if queries is not None and name not in queries:
            continue
        trigger = trigger_seconds(settings, name)
        context.setLocalProperty("spark.scheduler.pool", LATENCY_POOL if name == "traffic" else BACKGROUND_POOL)
        query = (
            rows.writeStream.outputMode(mode)
            .foreachBatch(writer)
            .option("checkpointLocation", f"{checkpoints}/{name}")
            .trigger(processingTime=f"{trigger} seconds")
            .queryName(name)
            .start()
        )
        job.queries.append(query)
    # The roll-ups and late-event records run on this (the main) thread.
    context.setLocalProperty("spark.scheduler.pool", BACKGROUND_POOL)
    return job


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m jobs.streaming", description="Run Tally's streaming views (Kafka -> Delta agg.*)."
    )
    parser.add_argument(
        "--query",
        dest="queries",
        action="append",
        choices=QUERY_NAMES,
        help="run only this view query (repeat for more); the default, and what `tally up` runs, is all of them."
        " The views of a query left out are not updated until it runs again (its checkpoint resumes where it was)"
        " or a backfill writes them",
    )
    args = parser.parse_args(argv)
    setup_logging()
    settings = load_settings()
    if settings.spark.metrics_port:
        start_http_server(settings.spark.metrics_port, addr="127.0.0.1")
    job = start(settings, queries=args.queries)
    started = kv(
        master=settings.spark.master, kafka=settings.kafka.servers, queries=",".join(args.queries or QUERY_NAMES)
    )
    log.info("streaming views started", extra=started)
    # The main thread records late-event figures and rolls the coarse views up, off the
    # queries' own threads so the 1-minute view is never held up by them.
    try:
        while not job.spark.streams.awaitAnyTermination(settings.spark.trigger_seconds):
            job.housekeeping()
    except StreamingQueryException as e:
        log.error("a view query failed; fix the cause, then `tally up` restarts it", extra=kv(error=str(e)[:2000]))
    job.late.flush(job.spark, settings)
    raise SystemExit(1)


if __name__ == "__main__":
    main()
