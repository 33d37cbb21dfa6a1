"""The warehouse on object storage: every part of Tally against an S3 API served on loopback (moto).

``warehouse.path`` is ``s3a://bucket/prefix``; the endpoint and the throwaway credentials come from
``TALLY_WAREHOUSE__*`` variables. The archiver (delta-rs) writes the raw table there from Kafka; a
backfill runs on a Spark standalone cluster (s3a, hadoop-aws); then ``tally audit`` reconciles
Kafka = raw = views and ``tally check`` validates the partitions, both writing their own tables on S3.
The row-by-row comparison with a local backfill and the streaming job on S3 take minutes more on
two shared cores: they are ``long``.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from ops.processes import Service, Supervisor
from tally.settings import Settings
from tally.storage import find_table
from tests.integration.conftest import wait_for
from tests.integration.views_support import isolated_settings, produce
from tests.scale.fixtures import FIRST, LAST, SITE, VIEWS, cluster, events, job_env, local_views
from tests.scale.jobs import StreamingJob, differences, settings_for, tally, until_same_views
from tests.scale.s3 import LocalS3, local_s3
from tests.scale.spark_cluster import SparkCluster

__all__ = ["cluster", "events", "local_views"]  # fixtures used by the tests below


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalS3]:
    with local_s3(tmp_path_factory.mktemp("s3")) as server:
        yield server


def _on_s3(settings: Settings, s3: LocalS3, home: Path, prefix: str) -> tuple[Settings, dict[str, str]]:
    """An isolated topic and home, with the warehouse at s3a://<bucket>/<prefix>; and its environment."""
    isolated = isolated_settings(settings, home)
    env = job_env(isolated) | s3.warehouse_env(prefix)
    return settings_for(env), env


def _raw_ids(settings: Settings) -> Counter[str]:
    table = find_table(settings, "raw.pageviews")
    if table is None:
        return Counter()
    return Counter(table.to_pyarrow_dataset().to_table(columns=["event_id"]).column("event_id").to_pylist())


@pytest.fixture(scope="module")
def archived(
    settings: Settings, kafka: str, s3: LocalS3, events: pa.Table, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Settings, dict[str, str]]]:
    """The events produced to Kafka and archived by a real archiver process into raw.pageviews on S3."""
    home = tmp_path_factory.mktemp("archiver-s3")
    on_s3, env = _on_s3(settings, s3, home, "tally")
    produce(on_s3, events.to_pylist())
    supervisor = Supervisor(home)
    supervisor.start(Service("archiver-s3", [sys.executable, "-m", "archiver"], env=env))
    try:
        wait_for(lambda: sum(_raw_ids(on_s3).values()) >= events.num_rows, 180, "the archiver to write raw on S3")
        yield on_s3, env
    finally:
        supervisor.stop("archiver-s3")


@pytest.fixture(scope="module")
def backfilled(archived: tuple[Settings, dict[str, str]], cluster: SparkCluster) -> Settings:
    """Every view recomputed from raw on S3 by ``tally backfill`` on the Spark cluster."""
    on_s3, env = archived
    tally(env | cluster.driver_env, "backfill", "--from", str(FIRST), "--to", str(LAST))
    return on_s3


def test_the_archiver_writes_every_event_exactly_once_to_the_raw_table_on_s3(
    archived: tuple[Settings, dict[str, str]], s3: LocalS3, events: pa.Table
) -> None:
    on_s3, _ = archived
    ids = _raw_ids(on_s3)
    assert set(ids) == set(events.column("event_id").to_pylist())
    assert max(ids.values()) == 1, f"doubled: {[i for i, n in ids.items() if n > 1][:5]}"
    assert any(k.endswith(".json") for k in s3.keys("tally/raw/pageviews/_delta_log/")), "no Delta log on S3"
    assert not (on_s3.home_dir / "warehouse").exists(), "something wrote a local warehouse"


def test_a_backfill_on_the_spark_cluster_writes_every_view_to_s3(
    backfilled: Settings, cluster: SparkCluster, s3: LocalS3
) -> None:
    assert [app for app in cluster.applications() if app["name"] == "tally-backfill"], "it did not run on the cluster"
    for spec in VIEWS:  # read back with delta-rs from S3; the audit below checks their numbers against raw
        table = find_table(backfilled, spec.table)
        assert table is not None and table.to_pyarrow_dataset().count_rows() > 0, f"{spec.table} is empty"
        assert s3.keys(f"tally/{spec.table.replace('.', '/')}/_delta_log/"), f"{spec.table} is not on S3"


@pytest.mark.long
def test_views_backfilled_on_the_cluster_over_s3a_equal_a_local_backfill(
    backfilled: Settings, local_views: Settings
) -> None:
    assert not differences(backfilled, local_views, VIEWS, SITE)


def test_the_audit_reconciles_kafka_raw_and_views_on_s3_and_records_there(
    archived: tuple[Settings, dict[str, str]], backfilled: Settings, s3: LocalS3
) -> None:
    _, env = archived
    done = tally(env, "audit", "--from", str(FIRST), "--to", str(LAST), "--site", SITE)
    assert "OK: Kafka, raw and the views agree" in done.stdout
    assert s3.keys("tally/quality/audits/_delta_log/"), "the audit recorded nothing on S3"


def test_the_quality_checks_pass_on_the_partitions_on_s3(
    archived: tuple[Settings, dict[str, str]], backfilled: Settings, s3: LocalS3
) -> None:
    _, env = archived
    tally(env, "check", "--date", str(FIRST), "--date", str(LAST))
    table = find_table(backfilled, "quality.results")
    assert table is not None and table.to_pyarrow_dataset().count_rows() > 0


@pytest.mark.long
def test_the_streaming_job_writes_the_views_to_s3_as_a_backfill_computes_them(
    settings: Settings, kafka: str, s3: LocalS3, events: pa.Table, local_views: Settings, tmp_path: Path
) -> None:
    on_s3, env = _on_s3(settings, s3, tmp_path, "streamed")
    produce(on_s3, events.to_pylist())
    job = StreamingJob(env, tmp_path / "views.log")
    try:
        until_same_views(on_s3, local_views, VIEWS, SITE, timeout=400)
        job.check_alive()
    finally:
        job.stop()
    assert s3.keys("streamed/_checkpoints/traffic/"), "the stream's checkpoints are not beside the tables on S3"


@pytest.mark.long
def test_tally_sql_registers_the_tables_on_s3_and_counts_raw_events(
    archived: tuple[Settings, dict[str, str]], events: pa.Table
) -> None:
    _, env = archived
    done = tally(env, "sql", "SELECT count(*) AS n FROM raw.pageviews")
    assert str(events.num_rows) in done.stdout, done.stdout
