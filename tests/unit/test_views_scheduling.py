"""The streaming job's fair-scheduler pools: the 1-minute view first, everything else behind it."""

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from jobs.spark import driver_java_options
from jobs.streaming import BACKGROUND_POOL, LATENCY_POOL, scheduler_pools, trigger_seconds, views_spark_config
from tally.settings import load_settings


def test_the_traffic_pool_outweighs_the_background_pool_in_the_allocation_file_spark_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TALLY_HOME", str(tmp_path))
    conf = scheduler_pools(load_settings())
    assert conf["spark.scheduler.mode"] == "FAIR"
    pools = {
        pool.get("name"): (int(pool.findtext("weight") or 0), int(pool.findtext("minShare") or 0))
        for pool in ET.parse(conf["spark.scheduler.allocation.file"]).getroot().iter("pool")
    }
    assert set(pools) == {LATENCY_POOL, BACKGROUND_POOL}
    assert pools[LATENCY_POOL][0] > pools[BACKGROUND_POOL][0]
    assert pools[LATENCY_POOL][1] >= 1, "the traffic query must get a core even while roll-ups run"
    assert Path(conf["spark.scheduler.allocation.file"]).is_relative_to(tmp_path)


def test_the_sessions_query_runs_on_its_own_longer_trigger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TALLY_HOME", str(tmp_path))
    monkeypatch.setenv("TALLY_SPARK__TRIGGER_SECONDS", "5")
    monkeypatch.setenv("TALLY_SPARK__SESSIONS_TRIGGER_SECONDS", "45")
    settings = load_settings()
    assert trigger_seconds(settings, "sessions") == 45
    # Neither a day's properties nor an hour's vitals need be seconds fresh.
    assert trigger_seconds(settings, "props") == trigger_seconds(settings, "vitals") == 45
    # The 1-minute view keeps the short one; the rate-limit counters have their own.
    assert trigger_seconds(settings, "traffic") == 5
    assert trigger_seconds(settings, "ratelimit") == settings.spark.ratelimit_trigger_seconds


def test_the_rate_limit_counters_run_on_their_own_trigger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TALLY_HOME", str(tmp_path))
    monkeypatch.setenv("TALLY_SPARK__RATELIMIT_TRIGGER_SECONDS", "10")
    assert trigger_seconds(load_settings(), "ratelimit") == 10
    assert trigger_seconds(load_settings(), "traffic") != 10, "not the 1-minute view's"


def test_the_streaming_job_runs_on_its_own_heap_not_the_batch_jobs_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TALLY_HOME", str(tmp_path))
    monkeypatch.setenv("TALLY_SPARK__DRIVER_MEMORY", "3g")
    monkeypatch.setenv("TALLY_SPARK__VIEWS_DRIVER_MEMORY", "900m")
    conf = views_spark_config(load_settings())
    assert conf["spark.driver.memory"] == "900m"
    assert conf["spark.scheduler.mode"] == "FAIR", "the pools are still set"
    monkeypatch.delenv("TALLY_SPARK__VIEWS_DRIVER_MEMORY")
    assert views_spark_config(load_settings())["spark.driver.memory"] == "1g", "768m ran out of heap at 500/s"


def test_the_streaming_job_gives_its_jvm_options_that_return_unused_heap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TALLY_HOME", str(tmp_path))
    options = views_spark_config(load_settings())["spark.driver.extraJavaOptions"].split()
    assert "-XX:+UseSerialGC" in options
    assert "-XX:MaxHeapFreeRatio=30" in options
    monkeypatch.setenv("TALLY_SPARK__VIEWS_JAVA_OPTIONS", "-XX:+UseG1GC")
    assert views_spark_config(load_settings())["spark.driver.extraJavaOptions"] == "-XX:+UseG1GC"


def test_a_jobs_jvm_options_are_added_to_the_factorys_own_not_put_in_their_place(tmp_path: Path) -> None:
    assert driver_java_options(tmp_path, "-XX:MaxHeapFreeRatio=30") == (
        f"-Dderby.system.home={tmp_path} -XX:MaxHeapFreeRatio=30"
    )
    assert driver_java_options(tmp_path, " ") == f"-Dderby.system.home={tmp_path}"


def test_the_streaming_job_keeps_its_state_in_rocksdb_in_bounded_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TALLY_HOME", str(tmp_path))
    conf = views_spark_config(load_settings())
    assert conf["spark.sql.streaming.stateStore.providerClass"].endswith(".RocksDBStateStoreProvider")
    assert conf["spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage"] == "true"
    assert int(conf["spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB"]) > 0


def test_the_streaming_job_keeps_the_status_of_few_finished_jobs_and_queries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark's defaults keep 1,000 finished jobs, stages and SQL executions and 100,000 tasks: a job
    that never ends grows its heap for hours. The views job keeps a few of each."""
    monkeypatch.setenv("TALLY_HOME", str(tmp_path))
    conf = views_spark_config(load_settings())
    for key, most in {
        "spark.ui.retainedJobs": 100,
        "spark.ui.retainedStages": 100,
        "spark.ui.retainedTasks": 1_000,
        "spark.sql.ui.retainedExecutions": 100,
        "spark.ui.dagGraph.retainedRootRDDs": 100,
    }.items():
        assert 0 < int(conf[key]) <= most, key


def test_spark_collects_the_views_jobs_heap_every_views_gc_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The serial collector gives back what the live set does not need only after a full collection."""
    monkeypatch.setenv("TALLY_HOME", str(tmp_path))
    assert views_spark_config(load_settings())["spark.cleaner.periodicGC.interval"] == "120s"
    monkeypatch.setenv("TALLY_SPARK__VIEWS_GC_SECONDS", "45")
    assert views_spark_config(load_settings())["spark.cleaner.periodicGC.interval"] == "45s"
