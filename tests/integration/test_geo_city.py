"""Region and city end to end: an ingest process with ``geo.city_db`` behind a trusted proxy, the
Kafka record, a backfill into views whose tables were written before the new columns, the API.

The city database is the tests' own tiny MaxMind DB file (tests/unit/test_geo_city.py).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest

from jobs.backfill import backfill
from jobs.delta_sink import upsert
from jobs.sessions import sessions
from jobs.views import with_event_ts
from ops.processes import Supervisor
from ops.stack import free_ports
from query.engine import run
from query.plausible import parse_query
from query.sources import Sources
from tally.schema import PageViewEvent
from tally.settings import Settings
from tally.table_schemas import RAW_PAGEVIEWS_SCHEMA
from tally.tables import SESSIONS, TRAFFIC_1D, VISITS_1D
from tests.integration.kafka_reader import read_topic
from tests.integration.test_ingest import FIREFOX, beacon, start_ingest
from tests.integration.views_support import view, write_raw
from tests.unit.test_geo_city import write_city_database

SITE = "demo.tally.local"
# The visitors' addresses, as the trusted proxy (the test, on 127.0.0.1) forwards them.
LONDON, BERLIN, UNKNOWN = "81.2.69.142", "2a02:8108:1:2::3", "8.8.8.8"


@pytest.fixture(scope="module")
def located(supervisor: Supervisor, kafka: str, settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Events sent through an ingest process that has a city database, as Kafka holds them."""
    city_db = write_city_database(tmp_path_factory.mktemp("geo") / "city.mmdb")
    ingest = start_ingest(supervisor, "ingest-geo", env={"TALLY_GEO__CITY_DB": str(city_db)})
    sent: dict[str, str] = {}
    try:
        for ip in (LONDON, LONDON, BERLIN, UNKNOWN):
            item = beacon(SITE)
            headers = {"User-Agent": FIREFOX, "X-Forwarded-For": ip, "Content-Type": "text/plain"}
            assert httpx.post(f"{ingest.url}/api/event", content=json.dumps(item), headers=headers).status_code == 202
            sent[item["id"]] = ip
    finally:
        supervisor.stop("ingest-geo")
    values = [v for _, v in read_topic(settings.kafka.servers, settings.kafka.pageviews_topic)]
    events = [PageViewEvent.from_json(v) for v in values if any(i.encode() in v for i in sent)]
    assert not any(ip.encode() in v for v in values for ip in sent.values()), "an IP reached Kafka"
    return {"events": events, "sent": sent}


def test_ingest_with_a_city_database_stores_region_and_city_for_ipv4_and_ipv6(located: dict[str, Any]) -> None:
    by_ip = {located["sent"][e.event_id]: (e.country, e.region, e.city) for e in located["events"]}
    assert len(located["events"]) == 4
    assert by_ip == {
        LONDON: ("GB", "GB-ENG", "London"),
        BERLIN: ("DE", "DE-BE", "Berlin"),
        UNKNOWN: (None, None, None),  # not in the test's database
    }


def _old_schema_table(spark: Any, settings: Settings, table: str, rows: Any) -> None:
    """``table`` as an older Tally wrote it: the same rows' columns but region and city."""
    rows.limit(0).drop("region", "city").write.format("delta").partitionBy("event_date").save(settings.table_uri(table))


@pytest.fixture(scope="module")
def backfilled(
    located: dict[str, Any], settings: Settings, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Settings]:
    """The located events in raw.pageviews of a warehouse of their own, and the views backfilled
    into tables that an older Tally created without region and city."""
    home = tmp_path_factory.mktemp("geo-views")
    iso = dataclasses.replace(
        settings, home=str(home), warehouse=dataclasses.replace(settings.warehouse, path=str(home / "warehouse"))
    )
    rows = []
    for event in located["events"]:
        row = vars(event) | {"kafka_partition": 0, "kafka_offset": 0}
        rows.append(row | {"event_date": dt.datetime.fromtimestamp(event.event_time / 1000, dt.UTC).date()})
    write_raw(iso, pa.Table.from_pylist(rows, schema=RAW_PAGEVIEWS_SCHEMA))
    days = sorted({r["event_date"] for r in rows})
    events = with_event_ts(spark.read.format("delta").load(iso.table_uri("raw.pageviews")))
    visits = sessions(events, iso.spark.session_gap)
    _old_schema_table(spark, iso, SESSIONS.table, visits)
    backfill(spark, iso, start=days[0], end=days[-1], progress=False)
    yield iso


def _values(frame: Any, dimension: str, column: str = "pageviews") -> dict[str, int]:
    rows = frame[(frame["site_id"] == SITE) & (frame["dimension"] == dimension)]
    return {value: int(count) for value, count in zip(rows["value"], rows[column], strict=True)}


def test_a_backfill_breaks_traffic_and_visits_down_by_region_and_city(backfilled: Settings) -> None:
    traffic = view(backfilled, TRAFFIC_1D.table)
    assert _values(traffic, "region") == {"GB-ENG": 2, "DE-BE": 1, "(none)": 1}
    assert _values(traffic, "city") == {"London": 2, "Berlin": 1, "(none)": 1}
    visits = view(backfilled, VISITS_1D.table)
    assert sum(_values(visits, "city", "visits").values()) == sum(_values(visits, "all", "visits").values())
    assert set(_values(visits, "region", "visits")) == {"GB-ENG", "DE-BE", "(none)"}


def test_agg_sessions_written_before_region_and_city_take_them_from_a_backfill_and_a_merge(
    backfilled: Settings, spark: Any
) -> None:
    uri = backfilled.table_uri(SESSIONS.table)
    stored = spark.read.format("delta").load(uri)
    assert {"region", "city"} <= set(stored.columns)  # added by the backfill's overwrite
    cities = {r["city"] for r in stored.collect()}
    assert {"London", "Berlin"} <= cities
    # The streaming job's MERGE (upsert) adds them to an older table too.
    other = dataclasses.replace(
        backfilled,
        warehouse=dataclasses.replace(backfilled.warehouse, path=str(Path(backfilled.home) / "warehouse-merge")),
    )
    _old_schema_table(spark, other, SESSIONS.table, stored)
    upsert(stored, SESSIONS, other)
    merged = spark.read.format("delta").load(other.table_uri(SESSIONS.table))
    assert sorted(r["city"] or "" for r in merged.collect()) == sorted(r["city"] or "" for r in stored.collect())


def test_the_query_layer_answers_visit_city_and_visit_region(backfilled: Settings) -> None:
    day = view(backfilled, TRAFFIC_1D.table)["event_date"].max()
    sources = Sources(backfilled)
    for metrics in (["pageviews"], ["visits"]):  # from agg.traffic_*, from agg.visits_*
        by_city = {
            "site_id": SITE,
            "metrics": metrics,
            "date_range": [str(day), str(day)],
            "dimensions": ["visit:city"],
        }
        answer = run(parse_query(by_city, today=day), sources)
        assert answer.meta["source"] == "aggregates"
        assert {r["dimensions"][0] for r in answer.results} == {"London", "Berlin", "(none)"}
    body = {
        "site_id": SITE,
        "metrics": ["pageviews"],
        "date_range": [str(day), str(day)],
        "dimensions": ["visit:region"],
        "filters": [["is", "visit:city", ["London"]]],
    }
    answer = run(parse_query(body, today=day), sources)
    assert answer.meta["source"] == "raw"
    assert [(r["dimensions"], r["metrics"]) for r in answer.results] == [(["GB-ENG"], [2])]


def test_an_ingest_whose_city_database_is_missing_stops_at_start_naming_the_setting(tmp_path: Path) -> None:
    missing = tmp_path / "GeoLite2-City.mmdb"
    env = os.environ | {"TALLY_GEO__CITY_DB": str(missing)}
    command = [sys.executable, "-m", "ingest", "--port", str(free_ports(1)[0])]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert "geo.city_db" in done.stderr and str(missing) in done.stderr
