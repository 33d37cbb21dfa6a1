"""Replicated Kafka: three KRaft brokers on loopback, every topic with replication factor 3 and
``min.insync.replicas=2``; ingest and the archiver reach it by ``kafka.bootstrap_servers`` alone.

Under steady load, the broker leading a ``pageviews`` partition is killed with SIGKILL. Ingest keeps
accepting (acks=all still has two in-sync replicas), the archiver keeps archiving from the new
leaders, and in the end every accepted event is in ``raw.pageviews`` exactly once and
``tally audit``'s Kafka = raw reconciliation finds nothing lost or doubled.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.compute as pc
import pytest

from ops.processes import Supervisor
from ops.stack import services, stack_env
from quality.audit import audit
from quality.findings import KAFKA_RAW
from tally.settings import Settings
from tally.storage import find_table
from tests.integration.conftest import wait_for
from tests.scale.jobs import settings_for
from tests.scale.kafka_cluster import KafkaCluster, cluster_nodes, kafka_cluster
from tests.scale.load import SteadyBeacons


@dataclass(frozen=True)
class Phases:
    before: float  # seconds of load before the kill
    after: float  # and after it
    rate: float  # beacons per second


SHORT = Phases(before=10, after=15, rate=20)
LONG = Phases(before=60, after=120, rate=50)


@dataclass(frozen=True)
class Replicated:
    settings: Settings
    cluster: KafkaCluster
    supervisor: Supervisor

    @property
    def site(self) -> str:
        return self.settings.sites[0].site_id

    @property
    def ingest_url(self) -> str:
        return f"http://127.0.0.1:{self.settings.ingest.port}"


@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[Replicated]:
    nodes = cluster_nodes(3)
    env = stack_env(tmp_path) | {
        "TALLY_KAFKA__BOOTSTRAP_SERVERS": ",".join(n.servers for n in nodes),
        "TALLY_KAFKA__REPLICATION_FACTOR": "3",
        "TALLY_KAFKA__MIN_INSYNC_REPLICAS": "2",
        "TALLY_KAFKA__HEAP": "384m",
    }
    settings = settings_for(env)
    supervisor = Supervisor(settings.home_dir)
    with kafka_cluster(settings, nodes) as cluster:
        table = services(settings, env)
        try:
            supervisor.start(table["ingest"])
            supervisor.start(table["archiver"])
            yield Replicated(settings, cluster, supervisor)
        finally:
            supervisor.stop("archiver")
            supervisor.stop("ingest")


def _raw_ids(settings: Settings, site: str) -> Counter[str]:
    table = find_table(settings, "raw.pageviews")
    if table is None:
        return Counter()
    ids = table.to_pyarrow_dataset().to_table(columns=["event_id"], filter=pc.field("site_id") == site)
    return Counter(ids.column("event_id").to_pylist())


def _kill_a_leader_under_load(stack: Replicated, phases: Phases) -> None:
    k = stack.settings.kafka
    assert set(stack.cluster.in_sync(k.pageviews_topic).values()) == {3}, "topics are not replicated 3 times"
    with SteadyBeacons(stack.ingest_url, stack.site, rate=phases.rate) as load:
        time.sleep(phases.before)
        victim = stack.cluster.leader(k.pageviews_topic, 0)
        stack.cluster.kill9(victim)
        killed_at = time.time()
        raw_at_kill = sum(_raw_ids(stack.settings, stack.site).values())
        time.sleep(phases.after)
    sent = load.sent
    assert not sent.unaccepted, f"{len(sent.unaccepted)} events were never accepted after the broker died"
    after_kill = load.accepted_since(killed_at)
    assert after_kill >= phases.after * phases.rate * 0.5, f"ingest accepted only {after_kill} events after the kill"
    # The controller declares the victim dead only after its session timeout (and first elects a
    # new controller if the victim was it): poll rather than look once.
    wait_for(lambda: stack.cluster.leader(k.pageviews_topic, 0) not in (victim, -1), 60, "a new leader for partition 0")

    accepted = set(sent.accepted)
    wait_for(lambda: accepted <= set(_raw_ids(stack.settings, stack.site)), 180, "the archiver to catch up")
    ids = _raw_ids(stack.settings, stack.site)
    assert sum(ids.values()) > raw_at_kill, "the archiver archived nothing after the kill"
    assert set(ids) == accepted, f"{len(set(ids) - accepted)} events in raw that ingest never accepted"
    doubled = [i for i, n in ids.items() if n > 1]
    assert not doubled, f"{len(doubled)} events doubled in raw, e.g. {doubled[:3]}"

    today = dt.datetime.now(dt.UTC).date()
    report = audit(stack.settings, start=today, end=today, site_id=stack.site, record=False)
    kafka_raw = [f for f in report.findings if f.check == KAFKA_RAW]
    assert kafka_raw, "the audit compared nothing between Kafka and raw"
    assert all(f.ok for f in kafka_raw), [f.message for f in kafka_raw if not f.ok]
    print(f"\n{len(accepted)} accepted ({after_kill} after killing broker {victim}), {sent.retries} retried attempts")


def test_killing_a_broker_under_load_loses_and_doubles_nothing(replicated: Replicated) -> None:
    _kill_a_leader_under_load(replicated, SHORT)


@pytest.mark.long
def test_killing_a_broker_under_heavier_longer_load_loses_and_doubles_nothing(replicated: Replicated) -> None:
    _kill_a_leader_under_load(replicated, LONG)
