"""The jobs, unchanged, on a Spark standalone cluster: a master and two one-core workers on loopback.

Only configuration changes (``TALLY_SPARK__MASTER=spark://…``). The backfill and the streaming job
each run on the cluster as their own process, exactly as an operator starts them, and their
views must equal a backfill of the same events on the test session's ``local[2]`` Spark.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from jobs.backfill import backfill
from jobs.views import ACTIVE_5M, RATELIMIT, SESSIONS, TRAFFIC_1D, TRAFFIC_1H, TRAFFIC_1M, VISITS_1D, VISITS_1H
from tally.settings import Settings
from tests.integration.views_support import isolated_settings, produce, write_raw
from tests.scale.jobs import StreamingJob, differences, tally, until_same_views
from tests.scale.spark_cluster import SparkCluster, spark_cluster
from traffic.synthetic import synthetic_events

START = dt.datetime(2026, 2, 3, 23, 0, tzinfo=dt.UTC)  # the visits cross midnight
SITE = "demo.tally.local"
VIEWS = (TRAFFIC_1M, TRAFFIC_1H, TRAFFIC_1D, ACTIVE_5M, SESSIONS, VISITS_1H, VISITS_1D, RATELIMIT)
DATES = ("2026-02-03", "2026-02-04")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    with spark_cluster(tmp_path_factory.mktemp("spark-cluster")) as running:
        yield running


@pytest.fixture(scope="module")
def events() -> pa.Table:
    rows = synthetic_events(visits=120, start=START, span=dt.timedelta(hours=2), site_id=SITE, seed=23)
    # One event of another site hours later moves the stream's watermark past every visit.
    closer = {**rows.slice(0, 1).to_pylist()[0], "event_id": "closer-1", "site_id": "closer.test"}
    later = START + dt.timedelta(hours=6)
    closer |= {k: int(later.timestamp() * 1000) for k in ("ts_event", "ts_sent", "ts_received", "event_time")}
    closer |= {"event_date": later.date(), "visitor_id": "closer", "client_hash": "closer", "is_bot": False}
    return pa.concat_tables([rows, pa.Table.from_pylist([closer], schema=rows.schema)])


@pytest.fixture(scope="module")
def local_views(
    settings: Settings, kafka: str, spark: Any, events: pa.Table, tmp_path_factory: pytest.TempPathFactory
) -> Settings:
    """The reference: a backfill of the events on the session's local Spark."""
    local = isolated_settings(settings, tmp_path_factory.mktemp("local-views"))
    write_raw(local, events)
    backfill(spark, local, start=dt.date.fromisoformat(DATES[0]), end=dt.date.fromisoformat(DATES[1]), progress=False)
    return local


def _env(settings: Settings, cluster: SparkCluster) -> dict[str, str]:
    """What an operator sets to move a job onto the cluster: the master, plus this test's isolation."""
    return {
        "TALLY_SPARK__MASTER": cluster.master_url,
        "TALLY_HOME": settings.home,
        "TALLY_WAREHOUSE__PATH": settings.warehouse_uri,
        "TALLY_KAFKA__PAGEVIEWS_TOPIC": settings.kafka.pageviews_topic,
        "TALLY_SPARK__METRICS_PORT": "0",
    }


def _ran_on_cluster(cluster: SparkCluster, name: str) -> list[dict[str, Any]]:
    return [app for app in cluster.applications() if app["name"] == name and app["cores"] >= 1]


def test_a_backfill_on_the_cluster_equals_one_on_local_spark(
    settings: Settings, cluster: SparkCluster, events: pa.Table, local_views: Settings, tmp_path: Path
) -> None:
    on_cluster = isolated_settings(settings, tmp_path)
    write_raw(on_cluster, events)
    tally(_env(on_cluster, cluster), "backfill", "--from", DATES[0], "--to", DATES[1])
    assert _ran_on_cluster(cluster, "tally-backfill"), f"no backfill ran on the cluster: {cluster.applications()}"
    assert not differences(on_cluster, local_views, VIEWS, SITE)


def test_the_streaming_job_on_the_cluster_computes_the_views_a_local_backfill_does(
    settings: Settings, cluster: SparkCluster, events: pa.Table, local_views: Settings, tmp_path: Path
) -> None:
    on_cluster = isolated_settings(settings, tmp_path)
    produce(on_cluster, events.to_pylist())
    job = StreamingJob(_env(on_cluster, cluster), tmp_path / "views.log")
    try:
        until_same_views(on_cluster, local_views, VIEWS, SITE, timeout=300)
        job.check_alive()
    finally:
        job.stop()
    assert _ran_on_cluster(cluster, "tally-views"), (
        f"the streaming job did not run on the cluster: {cluster.applications()}"
    )
