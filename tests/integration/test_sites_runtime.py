"""Sites at runtime against a real broker and two ingest processes: `tally site add` is followed by
both within seconds, `tally site remove` too, a restarted ingest still knows the runtime site, and a
garbage record on the sites topic costs nothing; `tally mcp` and `tally alerts check` know the
runtime sites too."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]
from mcp import ClientSession

from ops.processes import Service, Supervisor
from ops.stack import free_ports, http_ok
from tally.settings import Settings
from tests.integration.conftest import wait_for
from tests.support.mcp_client import text, with_session

FIREFOX = "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"
FOLLOW_S = 10  # the bound on "within seconds": a follower polls every 0.2 s
INGESTS = ("ingest-sites-a", "ingest-sites-b")


def ingest_service(name: str, port: int, workers: int) -> Service:
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "ingest", "--port", str(port), "--workers", str(workers), "--metrics-port", "0"]
    return Service(name, command, port=port, ready=functools.partial(http_ok, url + "/healthz"))


@pytest.fixture(scope="module")
def ingests(supervisor: Supervisor, kafka: str) -> Iterator[dict[str, Service]]:
    """Two ingest processes of their own, the second with two workers (each worker follows the topic)."""
    services = {
        name: ingest_service(name, port, workers)
        for name, port, workers in zip(INGESTS, free_ports(2), (1, 2), strict=True)
    }
    for service in services.values():
        supervisor.start(service)
    yield services
    for name in services:
        supervisor.stop(name)


def url_of(service: Service) -> str:
    return f"http://127.0.0.1:{service.port}"


def send(service: Service, site: str) -> httpx.Response:
    now = int(time.time() * 1000)
    beacon: dict[str, Any] = {"id": str(uuid.uuid4()), "k": "pageview", "s": site, "u": f"https://{site}/x"}
    beacon |= {"te": now, "ts": now}
    headers = {"Content-Type": "text/plain", "User-Agent": FIREFOX}
    return httpx.post(f"{url_of(service)}/api/event", json=beacon, headers=headers, timeout=10)


def tally(*argv: str) -> subprocess.CompletedProcess[str]:
    """The real command line, in this session's environment (its own home, ports and broker)."""
    return subprocess.run(
        [sys.executable, "-m", "tally", *argv], capture_output=True, text=True, env=os.environ.copy(), timeout=120
    )


def every_answer(services: dict[str, Service], site: str, status: int) -> bool:
    """True once every ingest process answers ``status`` for a beacon of ``site`` (several tries each,
    so that with two workers both are asked)."""
    return all(send(s, site).status_code == status for s in services.values() for _ in range(4))


def test_the_sites_topic_is_created_compacted(settings: Settings, kafka: str) -> None:
    admin = AdminClient(settings.kafka.client_config())
    resource = ConfigResource(ConfigResource.Type.TOPIC, settings.kafka.sites_topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    assert configs["cleanup.policy"].value == "compact"


def test_a_site_added_with_tally_site_add_is_accepted_by_both_ingests_within_seconds_then_refused_once_removed(
    settings: Settings, supervisor: Supervisor, ingests: dict[str, Service]
) -> None:
    site = f"rt-{uuid.uuid4().hex[:8]}.example"
    assert all(send(s, site).json()["error"] == "unknown_site" for s in ingests.values())

    added = tally("site", "add", site, "--domains", f"{site},www.{site}", "--salt-period", "week")
    assert added.returncode == 0, added.stderr
    start = time.monotonic()
    wait_for(lambda: every_answer(ingests, site, 202), FOLLOW_S, f"both ingests to accept {site}")
    followed_s = time.monotonic() - start
    listed = tally("site", "list")
    assert listed.returncode == 0, listed.stderr
    (line,) = [ln for ln in listed.stdout.splitlines() if ln.startswith(site)]
    assert line.split()[1:3] == ["runtime", "week"]

    # A restarted ingest reads the topic before it serves: its first answer already knows the site.
    supervisor.stop(INGESTS[0])
    supervisor.start(ingests[INGESTS[0]])
    assert send(ingests[INGESTS[0]], site).status_code == 202

    again = tally("site", "add", site, "--domains", site)
    assert again.returncode == 2 and "--replace" in again.stderr

    removed = tally("site", "remove", site)
    assert removed.returncode == 0, removed.stderr
    wait_for(lambda: every_answer(ingests, site, 403), FOLLOW_S, f"both ingests to refuse {site}")
    refusal = send(ingests[INGESTS[1]], site).json()
    assert refusal["error"] == "unknown_site"  # the same 403 as a site never configured

    supervisor.stop(INGESTS[1])
    supervisor.start(ingests[INGESTS[1]])
    assert send(ingests[INGESTS[1]], site).status_code == 403  # a restart does not bring it back

    unknown = tally("site", "remove", site)
    assert unknown.returncode == 2 and "tally site list" in unknown.stderr
    assert followed_s < FOLLOW_S


def test_a_seed_site_removed_at_runtime_stays_removed_across_a_restart_until_added_again(
    settings: Settings, supervisor: Supervisor, ingests: dict[str, Service]
) -> None:
    seeded = "limited.tally.test"  # in conf/test.yaml's sites:
    assert tally("site", "remove", seeded).returncode == 0
    try:
        wait_for(lambda: every_answer(ingests, seeded, 403), FOLLOW_S, f"both ingests to refuse {seeded}")
        supervisor.stop(INGESTS[0])
        supervisor.start(ingests[INGESTS[0]])
        assert send(ingests[INGESTS[0]], seeded).status_code == 403  # the seed does not bring it back
    finally:
        restored = tally("site", "add", seeded, "--domains", seeded, "--client-pageviews-per-hour", "5")
        assert restored.returncode == 0, restored.stderr
    wait_for(lambda: every_answer(ingests, seeded, 202), FOLLOW_S, f"both ingests to accept {seeded} again")


def test_a_garbage_record_on_the_sites_topic_is_skipped_and_ingest_keeps_following(
    settings: Settings, ingests: dict[str, Service]
) -> None:
    producer = Producer(settings.kafka.client_config())
    failed: list[str] = []
    garbage = [(b"junk.example", b"not json"), (b"junk.example", b'{"v": 1, "site": 3}'), (b"\xff", b"{}")]
    garbage += [(b"junk.example", b'{"v": 1, "site": {"site_id": "junk.example", "salt_period": "year"}}')]
    for key, value in garbage:  # (a compacted topic refuses a record without a key: Kafka keeps that out)
        producer.produce(
            settings.kafka.sites_topic,
            key=key,
            value=value,
            on_delivery=lambda e, _m: failed.extend([str(e)] if e else []),
        )
    assert producer.flush(10) == 0 and not failed
    site = f"rt-{uuid.uuid4().hex[:8]}.example"
    assert tally("site", "add", site, "--domains", site).returncode == 0
    wait_for(lambda: every_answer(ingests, site, 202), FOLLOW_S, f"both ingests to accept {site} after the garbage")
    assert all(send(s, "junk.example").status_code == 403 for s in ingests.values())
    for name in INGESTS:  # each bad record is a log line, not a crash
        assert (settings.home_dir / "logs" / f"{name}.log").read_text().count("bad site record ignored") >= 3
    assert tally("site", "remove", site).returncode == 0


def test_an_admin_key_adds_and_removes_a_site_through_the_stats_api_and_both_ingests_follow(
    settings: Settings, ingests: dict[str, Service]
) -> None:
    import datetime as dt

    from starlette.testclient import TestClient

    from api.app import create_app
    from api.keys import create_key, load_keys

    now = dt.datetime.now(dt.UTC)
    admin_key, _ = create_key(settings, name="site admin", sites=(), now=now, admin=True)
    reader_key, _ = create_key(settings, name="reader", sites=("*",), now=now)
    admin, reader = {"Authorization": f"Bearer {admin_key}"}, {"Authorization": f"Bearer {reader_key}"}
    site = f"api-{uuid.uuid4().hex[:8]}.example"
    query = {"site_id": site, "metrics": ["pageviews"], "date_range": "day"}
    with TestClient(create_app(settings)) as api:  # the lifespan runs: the API follows the topic
        assert api.post("/api/v2/query", json=query, headers=reader).status_code == 400  # not configured yet
        created = api.post(
            "/api/v1/sites", json={"site_id": site, "domains": [site], "salt_period": "month"}, headers=admin
        )
        assert created.status_code == 201, created.text
        assert created.json()["salt_period"] == "month"
        assert api.post("/api/v1/sites", json={"site_id": site, "domains": [site]}, headers=admin).status_code == 409
        listed = api.get("/api/v1/sites", headers=admin).json()
        assert {"site_id": site, "origin": "runtime"}.items() <= next(
            s for s in listed["sites"] if s["site_id"] == site
        ).items()
        assert api.post("/api/v2/query", json=query, headers=reader).status_code != 400  # the API knows it now
        wait_for(lambda: every_answer(ingests, site, 202), FOLLOW_S, f"both ingests to accept {site}")
        assert site in tally("site", "list").stdout

        assert api.delete(f"/api/v1/sites/{site}", headers=admin).json() == {"removed": site}
        assert api.delete(f"/api/v1/sites/{site}", headers=admin).status_code == 404
        wait_for(lambda: every_answer(ingests, site, 403), FOLLOW_S, f"both ingests to refuse {site}")
        assert site in api.get("/api/v1/sites", headers=admin).json()["removed"]
    trail = tally("changes", "--site", site).stdout  # the audit trail names the key that did each
    admin_id = next(k.key_id for k in load_keys(settings).values() if k.name == "site admin")
    assert trail.count(f"api key {admin_id}") == 2 and "site add: domains: " in trail and "site remove" in trail


def test_the_dashboard_s_sites_follow_tally_site_add_and_remove(settings: Settings, kafka: str) -> None:
    from dashboard.sites import with_current_sites

    site = f"dash-{uuid.uuid4().hex[:8]}.example"

    def shown() -> set[str]:
        return {s.site_id for s in with_current_sites(settings).sites}

    assert "demo.tally.local" in shown() and site not in shown()
    assert tally("site", "add", site, "--domains", site).returncode == 0
    wait_for(lambda: site in shown(), FOLLOW_S, f"the dashboard to list {site}")
    assert with_current_sites(settings).site(site) is not None  # the page's lookups see it too
    assert tally("site", "remove", site).returncode == 0
    wait_for(lambda: site not in shown(), FOLLOW_S, f"the dashboard to drop {site}")


def test_a_site_added_at_runtime_can_be_annotated_and_granted_from_the_command_line(
    settings: Settings, kafka: str
) -> None:
    site = f"cli-{uuid.uuid4().hex[:8]}.example"
    refused = tally("annotate", "--site", site, "--date", "2026-03-02", "before it exists")
    assert refused.returncode != 0 and "not configured" in refused.stderr
    assert tally("site", "add", site, "--domains", site).returncode == 0
    noted = tally("annotate", "--site", site, "--date", "2026-03-02", "launch")
    assert noted.returncode == 0, noted.stderr
    assert site in tally("annotate", "--list", "--site", site).stdout
    # The site is known to `tally share`: what stops this link is its creator's access, not the site.
    shared = tally("share", "create", "--site", site, "--creator", "nobody")
    assert "is not configured" not in shared.stderr and "'nobody' is not a dashboard user" in shared.stderr


def test_mcp_and_the_alerts_know_a_site_added_at_runtime(settings: Settings, kafka: str) -> None:
    site = f"mcp-{uuid.uuid4().hex[:8]}.example"
    assert tally("site", "add", site, "--domains", site).returncode == 0
    created = tally("apikey", "create", "--name", "runtime site", "--sites", site)
    assert created.returncode == 0, created.stderr
    key = created.stdout.splitlines()[0]

    async def scenario(client: ClientSession) -> tuple[Any, Any]:
        listed = await client.call_tool("list_sites", {})
        asked = {"site_id": site, "metrics": ["pageviews"], "date_range": "day"}
        answered = await client.call_tool("query", asked)
        assert not answered.is_error, text(answered)
        return listed.structured_content, answered.structured_content

    listed, answered = with_session(os.environ, key, scenario)
    assert listed == {"sites": [{"site_id": site, "domains": [site]}]}
    assert answered is not None and answered["results"] == [{"metrics": [0], "dimensions": []}]

    trail = tally("changes", "--site", site).stdout
    assert "command line" in trail and f"site add: domains: {site}" in trail
    checked = tally("alerts", "check", "--dry-run")  # every site's rules, the runtime one's too
    assert checked.returncode == 0, checked.stderr
    assert site in checked.stdout
