"""Stop the broker under traffic: ingest keeps answering 202 (spool), each answer within
``ingest.ack_timeout_ms`` and a little, and once the broker is back every event reaches Kafka and
raw.pageviews exactly once."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from deltalake import DeltaTable

from ops import broker
from ops.processes import Supervisor
from ops.stack import services, stack_env
from tally.settings import Settings, load_settings
from tests.integration.conftest import wait_for
from tests.integration.kafka_reader import read_topic


@pytest.fixture
def own_stack(tmp_path: Path) -> Iterator[tuple[Settings, Supervisor, dict[str, str]]]:
    """Broker, ingest and archiver of their own, so stopping this broker affects no other test."""
    env = stack_env(tmp_path / "home")
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    settings = load_settings()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key)
        else:
            os.environ[key] = value
    sup = Supervisor(settings.home_dir)
    table = services(settings, env)
    broker.ensure_formatted(settings)
    sup.start(table["broker"])
    broker.ensure_topics(settings)
    sup.start(table["ingest"])
    sup.start(table["archiver"])
    try:
        yield settings, sup, env
    finally:
        for name in ("archiver", "ingest", "broker"):
            sup.stop(name)


def send(url: str, site: str, event_id: str) -> int:
    now = int(time.time() * 1000)
    body = {"id": event_id, "s": site, "u": f"https://{site}/outage", "te": now, "ts": now}
    headers = {"Content-Type": "text/plain", "User-Agent": "Mozilla/5.0 Firefox/133.0"}
    return httpx.post(url + "/api/event", content=json.dumps(body), headers=headers, timeout=30).status_code


def timed_send(url: str, site: str, event_id: str) -> tuple[int, float]:
    started = time.monotonic()
    status = send(url, site, event_id)
    return status, time.monotonic() - started


def test_a_broker_outage_loses_no_event_and_doubles_none(
    own_stack: tuple[Settings, Supervisor, dict[str, str]],
) -> None:
    settings, sup, env = own_stack
    url, site = f"http://127.0.0.1:{settings.ingest.port}", settings.sites[0].site_id
    ids = [str(uuid.uuid4()) for _ in range(150)]
    assert [send(url, site, i) for i in ids[:50]] == [202] * 50

    sup.stop("broker")
    answers = [timed_send(url, site, i) for i in ids[50:]]
    assert [status for status, _ in answers] == [202] * 100  # safe in the spool meanwhile
    slowest = max(took for _, took in answers)
    bound = settings.ingest.ack_timeout_ms / 1000 + 1.0  # the spool's fsync and HTTP on a busy machine
    assert slowest < bound, f"a request waited {slowest:.1f} s for the dead broker (ingest.ack_timeout_ms)"
    # "draining" until a replay has failed on the dead broker (ingest/durable.py: a chunk sent within
    # DRAINING_FRESH_S reads as draining), then "degraded": waited for, as a replay takes its interval.
    wait_for(lambda: httpx.get(url + "/healthz").json()["status"] == "degraded", 60, "ingest to report degraded")
    health = httpx.get(url + "/healthz").json()
    assert health["spooled"] >= 1 and health["spool_bytes"] > 0

    sup.start(services(settings, env)["broker"])
    wait_for(lambda: httpx.get(url + "/healthz").json()["status"] == "ok", 90, "ingest to replay its spool")
    assert httpx.get(url + "/healthz").json()["spool_bytes"] == 0

    in_kafka = Counter(
        json.loads(v)["event_id"] for _, v in read_topic(settings.kafka.servers, settings.kafka.pageviews_topic)
    )
    assert set(ids) <= set(in_kafka), f"lost in Kafka: {len(set(ids) - set(in_kafka))}"

    def raw_ids() -> Counter[str]:
        try:
            return Counter(
                DeltaTable(settings.table_uri("raw.pageviews"))
                .to_pyarrow_table(columns=["event_id"])
                .column("event_id")
                .to_pylist()
            )
        except Exception:
            return Counter()

    wait_for(lambda: set(ids) <= set(raw_ids()), 90, "every event in raw.pageviews")
    counts = raw_ids()
    assert all(counts[i] == 1 for i in ids), "an event was archived twice"
