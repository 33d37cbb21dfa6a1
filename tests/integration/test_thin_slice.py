"""Beacon -> ingest (HTTP) -> Kafka -> archiver -> raw Delta -> streaming view -> agg Delta."""

from __future__ import annotations

import datetime as dt
import subprocess
import time
import uuid
from collections import Counter
from typing import TYPE_CHECKING, Any

import httpx
from deltalake import DeltaTable

from jobs import streaming
from ops import broker
from tally.settings import Settings
from tests.integration.conftest import wait_for

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CHROME = "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"
GOOGLEBOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
PAGES = ["/", "/pricing", "/docs"]


def beacon(site: str, path: str, at_ms: int) -> dict[str, Any]:
    """A page view that happened at ``at_ms`` and is sent now (the device clock is right)."""
    now_ms = int(time.time() * 1000)
    return {
        "v": 1,
        "id": str(uuid.uuid4()),
        "k": "pageview",
        "s": site,
        "u": f"https://{site}{path}",
        "te": at_ms,
        "ts": now_ms,
        "w": 1280,
    }


def raw_ids(settings: Settings, marker: str) -> list[str]:
    """event_ids of this test's events in raw.pageviews, read with delta-rs."""
    try:
        table = DeltaTable(settings.table_uri("raw.pageviews")).to_pyarrow_table(columns=["event_id", "path"])
    except Exception:
        return []
    pairs = zip(table.column("event_id").to_pylist(), table.column("path").to_pylist(), strict=True)
    return [str(i) for i, p in pairs if p.startswith(f"/{marker}/")]


def test_beacons_land_exactly_once_in_raw_and_in_the_per_minute_view(
    settings: Settings, ingest_url: str, archiver: None, spark: SparkSession
) -> None:
    site = settings.sites[0].site_id
    marker = uuid.uuid4().hex  # this test's pages; other tests share the broker and tables
    # Minutes in the recent past, each event at second 30 so that the few ms of
    # send->receive offset cannot move it across a minute boundary.
    base = dt.datetime.now(dt.UTC).replace(second=30, microsecond=0) - dt.timedelta(minutes=4)
    sent: list[dict[str, Any]] = []
    expected: Counter[tuple[dt.datetime, str]] = Counter()
    for minute in range(3):
        at = base + dt.timedelta(minutes=minute)
        for i, path in enumerate(PAGES):
            for _ in range(i + minute + 1):
                sent.append(beacon(site, f"/{marker}{path}", int(at.timestamp() * 1000)))
                expected[(at.replace(second=0), f"/{marker}{path}")] += 1
    bot = beacon(site, f"/{marker}/", int(base.timestamp() * 1000))
    headers = {"Content-Type": "text/plain", "User-Agent": CHROME}
    with httpx.Client(base_url=ingest_url, headers=headers, timeout=10) as client:
        singles, batch = sent[:5], sent[5:]
        for b in singles:
            assert client.post("/api/event", json=b).status_code == 202
        response = client.post("/api/event", json=batch)
        assert response.status_code == 202 and response.json() == {"accepted": len(batch)}
        assert client.post("/api/event", json=bot, headers={"User-Agent": GOOGLEBOT}).status_code == 202
        refused = client.post("/api/event", json=beacon(site, f"/{marker}/", 1) | {"te": "later"})
        assert refused.status_code == 422
        assert refused.json()["errors"][0]["field"] == "te (ts_event)"
    total = len(sent) + 1

    # Kafka, read by Kafka's own console consumer.
    consumer = broker.console_consumer_command(
        settings, settings.kafka.pageviews_topic, "--from-beginning", "--timeout-ms", "8000"
    )
    in_kafka: list[str] = []
    for _ in range(3):  # a cold consumer JVM may give up (8 s without a record) before its first fetch
        out = subprocess.run(consumer, capture_output=True, text=True, timeout=120).stdout
        in_kafka = [line for line in out.splitlines() if marker in line]
        if len(in_kafka) >= total:
            break
    assert len(in_kafka) == total

    # Raw table: every event exactly once, read by delta-rs and by Spark.
    sent_ids = sorted([b["id"] for b in sent] + [bot["id"]])
    wait_for(lambda: len(raw_ids(settings, marker)) >= total, 60, f"{total} rows in raw.pageviews")
    assert sorted(raw_ids(settings, marker)) == sent_ids
    spark_raw = spark.read.format("delta").load(settings.table_uri("raw.pageviews")).where(f"path LIKE '/{marker}/%'")
    assert spark_raw.count() == total and spark_raw.select("event_id").distinct().count() == total
    assert spark_raw.where("is_bot").count() == 1

    # The dead letter of the refused beacon.
    wait_for(lambda: _rejected_kinds(settings, marker) == ["invalid_event"], 30, "the dead letter in raw.rejected")

    # The streaming view: page views per page per minute, bots excluded (its query alone: the
    # session's topic holds every earlier test's events, which the other queries would also read).
    job = streaming.start(settings, checkpoint_root=str(settings.home_dir / "test-checkpoints"), queries=("traffic",))
    try:
        job.process_all_available()
    finally:
        job.stop()
    agg = DeltaTable(settings.table_uri("agg.traffic_1m")).to_pandas()
    by_delta_rs = {
        (row.window_start.to_pydatetime(), row.value): row.pageviews
        for row in agg.itertuples()
        if row.dimension == "page" and row.value.startswith(f"/{marker}/")
    }
    assert by_delta_rs == dict(expected)
    spark_agg = spark.read.format("delta").load(settings.table_uri("agg.traffic_1m"))
    by_spark = {
        (r.window_start.replace(tzinfo=dt.UTC), r.value): r.pageviews
        for r in spark_agg.where(f"dimension = 'page' AND value LIKE '/{marker}/%'").collect()
    }
    assert by_spark == dict(expected)


def _rejected_kinds(settings: Settings, marker: str) -> list[str]:
    try:
        table = DeltaTable(settings.table_uri("raw.rejected")).to_pyarrow_table(columns=["kind", "payload"])
    except Exception:
        return []
    rows = zip(table.column("kind").to_pylist(), table.column("payload").to_pylist(), strict=True)
    return [str(k) for k, p in rows if marker in (p or "")]
