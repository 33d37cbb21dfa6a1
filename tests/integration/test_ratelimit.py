"""Rate limits across two separate ingest processes sharing one Kafka."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import json
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer

from ingest.enrich import client_hash
from jobs import streaming
from ops.processes import Service, Supervisor
from ops.site_commands import add_site
from ops.stack import free_ports, http_ok
from tally.settings import Settings, SiteSettings
from tests.integration.conftest import wait_for
from tests.integration.kafka_reader import read_topic

LIMIT = 5
METRICS: dict[str, str] = {}  # an ingest server's URL -> its metrics URL (on 127.0.0.1 only)


@pytest.fixture(scope="module")
def two_ingests(settings: Settings, supervisor: Supervisor, kafka: str) -> Iterator[list[str]]:
    urls = []
    ports = free_ports(4)  # each server's public port, and its loopback metrics port
    for name, port, metrics_port in zip(("ingest-a", "ingest-b"), ports[:2], ports[2:], strict=True):
        url = f"http://127.0.0.1:{port}"
        METRICS[url] = f"http://127.0.0.1:{metrics_port}/metrics"
        supervisor.start(
            Service(
                name,
                [sys.executable, "-m", "ingest", "--port", str(port), "--metrics-port", str(metrics_port)],
                port=port,
                env={"TALLY_RATELIMIT__CLIENT_PAGEVIEWS_PER_HOUR": str(LIMIT)},
                ready=functools.partial(http_ok, url + "/healthz"),
            )
        )
        urls.append(url)
    yield urls
    for name in ("ingest-a", "ingest-b"):
        supervisor.stop(name)


def clear_of_the_hour(margin_s: float = 60) -> None:
    """Wait out the last ``margin_s`` seconds of a clock hour, if we are in them.

    Limits count page views per clock hour (ingest's counters and the job's windows alike), so
    page views sent across the turn of the hour split between two windows, each under the limit.
    """
    left = 3600 - time.time() % 3600
    if left < margin_s:
        time.sleep(left + 1)


def send(url: str, site: str, ip: str, **extra: str) -> httpx.Response:
    now = int(time.time() * 1000)
    body = {"id": str(uuid.uuid4()), "s": site, "u": f"https://{site}/", "te": now, "ts": now, **extra}
    headers = {"Content-Type": "text/plain", "X-Forwarded-For": ip, "User-Agent": "Mozilla/5.0 Firefox/133.0"}
    return httpx.post(url + "/api/event", content=json.dumps(body), headers=headers, timeout=10)


def test_a_client_over_its_hourly_page_views_gets_429_and_a_dead_letter(
    settings: Settings, two_ingests: list[str]
) -> None:
    site, ip = settings.sites[0].site_id, "203.0.113.50"
    clear_of_the_hour()
    statuses = [send(two_ingests[0], site, ip).status_code for _ in range(LIMIT)]
    assert statuses == [202] * LIMIT
    refused = send(two_ingests[0], site, ip)
    assert refused.status_code == 429
    assert 1 <= int(refused.headers["Retry-After"]) <= 3600
    assert refused.json()["error"] == "rate_limited"
    assert send(two_ingests[0], site, "203.0.113.51").status_code == 202  # another client is unaffected
    letters = [json.loads(v) for _, v in read_topic(settings.kafka.servers, settings.kafka.rejected_topic)]
    assert any(d["kind"] == "rate_limited" and d["status"] == 429 for d in letters)
    metrics = httpx.get(METRICS[two_ingests[0]]).text
    assert "tally_ingest_throttled_requests_total 1.0" in metrics


def test_a_client_cannot_dodge_its_limit_with_a_forged_x_forwarded_for(
    settings: Settings, two_ingests: list[str]
) -> None:
    """The loopback peer is a trusted proxy: it appended the client's address (the rightmost);
    whatever the client wrote to the left of it changes nothing."""
    site, ip = settings.sites[0].site_id, "203.0.113.52"
    clear_of_the_hour()
    statuses = [send(two_ingests[0], site, f"192.0.2.{n}, {ip}").status_code for n in range(LIMIT + 1)]
    assert statuses == [202] * LIMIT + [429]


def test_a_block_published_on_kafka_is_honoured_by_every_ingest_within_30_s(
    settings: Settings, two_ingests: list[str]
) -> None:
    site, ip = settings.sites[0].site_id, "203.0.113.77"
    day = dt.datetime.now(dt.UTC).date().isoformat()  # the salt of the sends' day
    assert all(send(url, site, ip).status_code == 202 for url in two_ingests)
    salt = bytes.fromhex((settings.home_dir / "salts" / f"{day}.salt").read_text().strip())
    producer = Producer({"bootstrap.servers": settings.kafka.servers})
    until = int(time.time() * 1000) + 120_000
    producer.produce(
        settings.kafka.ratelimit_topic,
        key=client_hash(salt, ip).encode(),
        value=json.dumps({"blocked_until": until}).encode(),
    )
    producer.flush(10)
    for url in two_ingests:
        # Probe with custom events: they do not count against the in-process page-view limit
        # (LIMIT), so only the published block can refuse them.
        refused = functools.partial(lambda u: send(u, site, ip, k="event", n="probe").status_code == 429, url)
        wait_for(refused, 30, f"{url} to honour the block")
        assert "rate-limit job" in send(url, site, ip, k="event", n="probe").text
    assert all(httpx.get(url + "/healthz").json()["blocked_clients"] >= 1 for url in two_ingests)


def test_a_client_over_the_limit_across_two_ingests_is_blocked_by_the_job_everywhere(
    settings: Settings, two_ingests: list[str], spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    seeded, ip = settings.site("limited.tally.test"), "198.51.100.23"
    # A site added at runtime with a limit of its own: the job learns it from the sites topic.
    runtime = SiteSettings("runtime-limited.tally.test", client_pageviews_per_hour=3)
    add_site(settings, runtime)
    assert seeded is not None
    home = tmp_path_factory.mktemp("ratelimit-job")
    job_settings = dataclasses.replace(
        settings, home=str(home), warehouse=dataclasses.replace(settings.warehouse, path=str(home / "warehouse"))
    )
    # The rate-limit query alone: the other views are not asserted here, and each would read the
    # session topic's backlog of earlier tests first.
    job = streaming.start(job_settings, checkpoint_root=str(home / "checkpoints"), queries=("ratelimit",))
    try:
        job.process_all_available()  # the backlog of earlier tests
        clear_of_the_hour()
        shares = {}
        for site, address in ((seeded, ip), (runtime, "198.51.100.24")):
            # Each ingest sees only its share, within the limit; together they exceed it.
            shares[site.site_id] = share = settings.client_limit(site) // 2 + 1
            for url in two_ingests:
                assert [send(url, site.site_id, address).status_code for _ in range(share)] == [202] * share
            for url in two_ingests:
                # Probe with custom events: they do not count against the in-process page-view limit,
                # so only the job's block can refuse them.
                probe = functools.partial(send, url, site.site_id, address, k="event", n="probe")
                # Generous: the job's micro-batch, its Delta merge and the block's trip through Kafka
                # share 2 cores with the other views' queries; a block usually lands within seconds.
                refused = functools.partial(lambda p: p().status_code == 429, probe)
                wait_for(refused, 120, f"{url} to refuse the client the job blocked")
                assert "rate-limit job" in probe().text
    finally:
        job.stop()
    blocks = [json.loads(v) for _, v in read_topic(settings.kafka.servers, settings.kafka.ratelimit_topic)]
    for site_id, share in shares.items():
        table = spark.read.format("delta").load(job_settings.table_uri("agg.ratelimit"))
        counts = table.where(f"site_id = '{site_id}'")
        assert [r.pageviews for r in counts.collect()] == [2 * share]
        assert any(b.get("site_id") == site_id and b["pageviews"] == 2 * share for b in blocks)
