"""Replicated Kafka: three KRaft brokers on loopback, every topic with replication factor 3 and
``min.insync.replicas=2``; ingest and the archiver reach it by ``kafka.bootstrap_servers`` alone.

Under steady open-loop load (each beacon sent once, on schedule, whatever ingest answered before),
the broker leading a ``pageviews`` partition is killed with SIGKILL. Until the controller elects a new
leader, Kafka acknowledges nothing for that partition; ingest waits at most ``ingest.ack_timeout_ms``,
then fsyncs the event to its spool and answers 202. So every beacon is answered 202, ingest counts a
turn to the spool on an ack timeout (it did not wait for the new leader), the spool is replayed once
the new leader is there, and in the end every accepted event is in ``raw.pageviews`` exactly once (a
late acknowledgement plus the replay make a double in Kafka, which the archiver's ``event_id``
deduplication drops) and ``tally audit``'s Kafka = raw reconciliation finds nothing lost or doubled.
The latency during the election is printed, not asserted.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
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
from tests.scale.load import USER_AGENT
from tests.support.stacks import OnStack


@dataclass(frozen=True)
class Phases:
    before: float  # seconds of load before the kill
    after: float  # and after the new leader is elected
    rate: float  # beacons per second


SHORT = Phases(before=5, after=5, rate=20)
LONG = Phases(before=60, after=120, rate=50)
ACK_TIMEOUT_MS = 500  # ingest.ack_timeout_ms (its default), set explicitly


@dataclass
class Answer:
    sent_at: float  # time.time() the beacon was due and sent
    status: int  # 0: no HTTP answer (connection error, timeout)
    latency_s: float


@dataclass
class OpenLoopBeacons:
    """``rate`` beacons a second, each sent once at its time from its own task, whatever ingest answered
    before: a stalled request cannot slow the load down (as a closed loop would, hiding the stall)."""

    url: str
    site: str
    rate: float
    answers: dict[str, Answer] = field(default_factory=dict)  # event_id -> its answer
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> OpenLoopBeacons:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), name="beacons", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join(60)
        assert not self._thread.is_alive(), "the load did not stop within 60 s"

    async def _one(self, client: httpx.AsyncClient, i: int) -> None:
        event_id, now = str(uuid.uuid4()), time.time()
        ms = int(now * 1000)
        body = json.dumps({"id": event_id, "s": self.site, "u": f"https://{self.site}/p/{i % 50}", "te": ms, "ts": ms})
        # A visitor per 20 events: distinct clients, so no rate limit applies.
        headers = {
            "Content-Type": "text/plain",
            "User-Agent": USER_AGENT,
            "X-Forwarded-For": f"198.51.100.{i // 20 % 250}",
        }
        started = time.monotonic()
        try:
            status = (await client.post(self.url + "/api/event", content=body, headers=headers)).status_code
        except httpx.HTTPError:
            status = 0
        self.answers[event_id] = Answer(now, status, time.monotonic() - started)

    async def _run(self) -> None:
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=50)
        async with httpx.AsyncClient(timeout=30, limits=limits) as client:
            tasks: set[asyncio.Task[None]] = set()
            started, i = time.monotonic(), 0
            while not self._stop.is_set():
                task = asyncio.create_task(self._one(client, i))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                i += 1
                await asyncio.sleep(max(0.0, started + i / self.rate - time.monotonic()))
            await asyncio.gather(*tasks)

    def between(self, start: float, end: float) -> list[Answer]:
        return [a for a in list(self.answers.values()) if start <= a.sent_at <= end]


def p99(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def ingest_counter(metrics_port: int, sample: str) -> float:
    """A Prometheus sample of ingest's, e.g. ``tally_ingest_stored_total{store="spool"}`` (0 if absent)."""
    text = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(sample + " "))


@dataclass(frozen=True)
class Replicated(OnStack):
    settings: Settings
    cluster: KafkaCluster
    supervisor: Supervisor


@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[Replicated]:
    nodes = cluster_nodes(3)
    env = stack_env(tmp_path) | {
        "TALLY_KAFKA__BOOTSTRAP_SERVERS": ",".join(n.servers for n in nodes),
        "TALLY_KAFKA__REPLICATION_FACTOR": "3",
        "TALLY_KAFKA__MIN_INSYNC_REPLICAS": "2",
        "TALLY_KAFKA__HEAP": "384m",
        "TALLY_INGEST__ACK_TIMEOUT_MS": str(ACK_TIMEOUT_MS),
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


def _spooling(stack: Replicated) -> tuple[float, float, float]:
    """Events ingest has spooled so far, and its turns to the spool on an ack timeout and on a refusal."""
    port = stack.settings.ingest.metrics_port
    return (
        ingest_counter(port, 'tally_ingest_stored_total{store="spool"}'),
        ingest_counter(port, 'tally_ingest_spooling_total{reason="ack_timeout"}'),
        ingest_counter(port, 'tally_ingest_spooling_total{reason="unavailable"}'),
    )


def _kill_a_leader_under_load(stack: Replicated, phases: Phases) -> None:
    k = stack.settings.kafka
    assert set(stack.cluster.in_sync(k.pageviews_topic).values()) == {3}, "topics are not replicated 3 times"
    with OpenLoopBeacons(stack.ingest_url, stack.site, rate=phases.rate) as load:
        time.sleep(phases.before)
        victim = stack.cluster.leader(k.pageviews_topic, 0)
        raw_at_kill = sum(_raw_ids(stack.settings, stack.site).values())
        before_kill = _spooling(stack)
        killed_at = time.time()
        stack.cluster.kill9(victim)
        # The controller declares the victim dead only after its session timeout (and first elects a
        # new controller if the victim was it): poll rather than look once.
        wait_for(
            lambda: stack.cluster.leader(k.pageviews_topic, 0) not in (victim, -1), 60, "a new leader for partition 0"
        )
        elected_at = time.time()
        time.sleep(phases.after)
    answers = list(load.answers.values())
    during = load.between(killed_at, elected_at)
    assert len(answers) >= (phases.before + phases.after) * phases.rate * 0.9, "the load did not keep its rate"
    refused = Counter(a.status for a in answers if a.status != 202)
    assert not refused, f"not every beacon was accepted: {dict(refused)} (status: count; 0 = no answer)"
    # A request that stopped waiting at ingest.ack_timeout_ms is counted as reason "ack_timeout";
    # one whose records Kafka refused or failed to deliver as "unavailable". Which one a kill -9
    # brings depends on whether the producer notices the closed socket before the timeout (CI saw
    # both), so either counts as a turn; a request waiting out the election would be neither. The
    # latency is printed, not asserted: tests check behaviour, not wall-clock time (three brokers,
    # ingest and the archiver share 2 cores).
    spooled, timeouts, refusals = (after - before for after, before in zip(_spooling(stack), before_kill, strict=True))
    worst = p99([a.latency_s for a in during])
    election = elected_at - killed_at
    print(
        f"\nleader election {election:.1f} s: {len(during)} beacons, all 202, p99 {worst * 1000:.0f} ms "
        f"(ingest.ack_timeout_ms {ACK_TIMEOUT_MS}); since the kill {spooled:.0f} events spooled by ingest, "
        f"turns to the spool on an ack timeout: {timeouts:.0f}, on Kafka refusing: {refusals:.0f}"
    )
    assert spooled > 0 and timeouts + refusals > 0, "ingest did not turn to its spool after the kill"

    accepted = set(load.answers)
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
    print(f"{len(accepted)} accepted in all, {len(ids)} in raw.pageviews once each (killed broker {victim})")


def test_killing_a_partition_leader_under_load_every_beacon_is_spooled_not_stalled_and_none_lost_or_doubled(
    replicated: Replicated,
) -> None:
    _kill_a_leader_under_load(replicated, SHORT)


@pytest.mark.long
def test_killing_a_broker_under_heavier_longer_load_loses_and_doubles_nothing(replicated: Replicated) -> None:
    _kill_a_leader_under_load(replicated, LONG)
