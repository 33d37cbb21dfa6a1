"""Real parts for integration tests: a Kafka broker, ingest and archiver processes, local Spark.

Each session gets its own home directory and free ports, so tests never touch a running
demo stack, and every process started here is stopped here (by PID).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import pytest

from ops import broker
from ops.processes import Supervisor
from ops.stack import services, stack_env
from tally.settings import Settings, load_settings
from tests.integration.march_sites import MARCH_SITES, UTC_DAYS, VITALS_DAYS, march_sites_events
from tests.integration.views_support import MARCH_FIRST, MARCH_LAST, at_home, march_events, table_versions, write_raw

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Bounded retry: poll until ``condition`` holds or fail the test naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


@pytest.fixture(scope="session")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    env = stack_env(tmp_path_factory.mktemp("tally-home"))
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield load_settings()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def supervisor(settings: Settings) -> Iterator[Supervisor]:
    sup = Supervisor(settings.home_dir)
    yield sup
    for name in ("archiver", "ingest", "broker"):
        sup.stop(name)


@pytest.fixture(scope="session")
def kafka(settings: Settings, supervisor: Supervisor) -> str:
    broker.ensure_formatted(settings)
    supervisor.start(services(settings)["broker"])
    broker.wait_until_ready(settings.kafka.servers)
    broker.ensure_topics(settings)
    return settings.kafka.servers


@pytest.fixture(scope="session")
def ingest_url(settings: Settings, supervisor: Supervisor, kafka: str) -> str:
    supervisor.start(services(settings)["ingest"])
    return f"http://127.0.0.1:{settings.ingest.port}"


@pytest.fixture(scope="session")
def archiver(settings: Settings, supervisor: Supervisor, kafka: str) -> None:
    supervisor.start(services(settings)["archiver"])


@pytest.fixture(scope="session")
def spark(settings: Settings) -> Iterator[SparkSession]:
    from jobs.spark import spark_session

    session = spark_session(settings, "tally-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def march(settings: Settings, spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """A warehouse of its own with ``march_events()`` (the demo site's, ``MARCH_FIRST..MARCH_LAST``)
    and the events of march_sites.py's sites (vitals, time zones, custom event properties; each
    site has a test file of its own) in raw.pageviews, every view backfilled for all their dates:
    one Spark backfill for every test that reads reports of a few days. Its settings know
    ``MARCH_SITES`` too. Tests read it; one that writes works on ``copy_warehouse(march, home)``,
    since the tables are shared by the whole session (checked when it ends)."""
    from jobs.backfill import backfill

    iso = at_home(settings, tmp_path_factory.mktemp("march"))
    iso = dataclasses.replace(iso, sites=iso.sites + MARCH_SITES)
    write_raw(iso, march_events())
    write_raw(iso, march_sites_events())
    first, last = MARCH_FIRST, max(MARCH_LAST, VITALS_DAYS[-1], UTC_DAYS[-1])
    # All dates in one chunk: one Spark job per view rather than one per week (the data is small).
    days = (last - first).days + 1
    one_chunk = dataclasses.replace(iso, spark=dataclasses.replace(iso.spark, backfill_chunk_days=days))
    backfill(spark, one_chunk, start=first, end=last, progress=False)
    versions = table_versions(iso)
    yield iso
    assert table_versions(iso) == versions, "a test wrote to the shared `march` tables: write to copy_warehouse()"
