"""Fixtures shared by the scale-out test modules (import them into a module to use them there).

``events`` are synthetic visits crossing midnight plus one later event of another site that moves
a stream's watermark past every visit; ``local_views`` is the reference every scaled-out run is
compared with: a backfill of those events on the test session's ``local[2]`` Spark.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from jobs.backfill import backfill
from simulator.synthetic import synthetic_events
from tally.settings import Settings
from tally.tables import (
    ACTIVE_5M,
    EVENTS,
    RATELIMIT,
    SESSIONS,
    TRAFFIC_1D,
    TRAFFIC_1H,
    TRAFFIC_1M,
    VISITS_1D,
    VISITS_1H,
)
from tests.integration.views_support import isolated_settings, write_raw
from tests.scale.spark_cluster import SparkCluster, spark_cluster

START = dt.datetime(2026, 2, 3, 23, 0, tzinfo=dt.UTC)  # the visits cross midnight
FIRST, LAST = START.date(), START.date() + dt.timedelta(days=1)
SITE = "demo.tally.local"
VIEWS = (TRAFFIC_1M, TRAFFIC_1H, TRAFFIC_1D, ACTIVE_5M, SESSIONS, EVENTS, VISITS_1H, VISITS_1D, RATELIMIT)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkCluster]:
    with spark_cluster(tmp_path_factory.mktemp("spark-cluster")) as running:
        yield running


@pytest.fixture(scope="module")
def events() -> pa.Table:
    rows = synthetic_events(visits=120, start=START, span=dt.timedelta(hours=2), site_id=SITE, seed=23)
    closer = {
        **rows.slice(0, 1).to_pylist()[0],
        "event_id": "00000000-0000-4000-8000-00000000c105",
        "site_id": "closer.test",
    }
    later = START + dt.timedelta(hours=6)
    closer |= {k: int(later.timestamp() * 1000) for k in ("ts_event", "ts_sent", "ts_received", "event_time")}
    closer |= {"event_date": later.date(), "visitor_id": "closer", "client_hash": "closer", "is_bot": False}
    return pa.concat_tables([rows, pa.Table.from_pylist([closer], schema=rows.schema)])


@pytest.fixture(scope="module")
def local_views(
    settings: Settings, kafka: str, spark: Any, events: pa.Table, tmp_path_factory: pytest.TempPathFactory
) -> Settings:
    """The reference: a backfill of the events on the session's local Spark, in a local warehouse."""
    local = isolated_settings(settings, tmp_path_factory.mktemp("local-views"))
    write_raw(local, events)
    backfill(spark, local, start=FIRST, end=LAST, progress=False)
    return local


def job_env(settings: Settings, cluster: SparkCluster | None = None) -> dict[str, str]:
    """Environment of a job process: the test's isolation (home, warehouse, topic), plus the cluster's master."""
    env = {
        "TALLY_HOME": settings.home,
        "TALLY_WAREHOUSE__PATH": settings.warehouse_uri,
        "TALLY_KAFKA__PAGEVIEWS_TOPIC": settings.kafka.pageviews_topic,
        "TALLY_SPARK__METRICS_PORT": "0",
        "TALLY_ARCHIVER__METRICS_PORT": "0",
    }
    return env | (cluster.driver_env if cluster else {})
