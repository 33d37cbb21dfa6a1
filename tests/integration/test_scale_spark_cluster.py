"""The jobs, unchanged, on a Spark standalone cluster: a master and two one-core workers on loopback.

Only configuration changes (``TALLY_SPARK__MASTER=spark://…``). The backfill and the streaming job
each run on the cluster as their own process, exactly as an operator starts them, and their
views must equal a backfill of the same events on the test session's ``local[2]`` Spark.
Both take minutes on two shared cores, so they are ``long``; CI runs the backfill on the cluster
with the warehouse on S3 (``test_scale_s3.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tally.settings import Settings
from tests.integration.views_support import isolated_settings, produce, write_raw
from tests.scale.fixtures import FIRST, LAST, SITE, VIEWS, cluster, events, job_env, local_views
from tests.scale.jobs import StreamingJob, differences, tally, until_same_views
from tests.scale.spark_cluster import SparkCluster

__all__ = ["cluster", "events", "local_views"]  # fixtures used by the tests below


def ran_on_cluster(cluster: SparkCluster, name: str) -> list[dict[str, Any]]:
    """Applications of that name the master gave executor cores to."""
    return [app for app in cluster.applications() if app["name"] == name and app["cores"] >= 1]


@pytest.mark.long
def test_a_backfill_on_the_cluster_equals_one_on_local_spark(
    settings: Settings, cluster: SparkCluster, events: pa.Table, local_views: Settings, tmp_path: Path
) -> None:
    on_cluster = isolated_settings(settings, tmp_path)
    write_raw(on_cluster, events)
    tally(job_env(on_cluster, cluster), "backfill", "--from", str(FIRST), "--to", str(LAST))
    assert ran_on_cluster(cluster, "tally-backfill"), f"no backfill ran on the cluster: {cluster.applications()}"
    assert not differences(on_cluster, local_views, VIEWS, SITE)


@pytest.mark.long
def test_the_streaming_job_on_the_cluster_computes_the_views_a_local_backfill_does(
    settings: Settings, cluster: SparkCluster, events: pa.Table, local_views: Settings, tmp_path: Path
) -> None:
    on_cluster = isolated_settings(settings, tmp_path)
    produce(on_cluster, events.to_pylist())
    job = StreamingJob(job_env(on_cluster, cluster), tmp_path / "views.log")
    try:
        until_same_views(on_cluster, local_views, VIEWS, SITE, timeout=400)
        job.check_alive()
    finally:
        job.stop()
    assert ran_on_cluster(cluster, "tally-views"), (
        f"the streaming job did not run on the cluster: {cluster.applications()}"
    )
