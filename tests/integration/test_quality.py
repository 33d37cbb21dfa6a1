"""Data quality against real Kafka, Spark and Delta: a clean range passes, and injected defects are named.

Synthetic events of one evening (crossing midnight) are produced to an isolated topic, with
retried duplicates and one undecodable message, and archived as the archiver would (each row
carries its Kafka partition and offset; the undecodable message is a raw.rejected row). The
views are built by a backfill. One page view arrives three hours late: it is archived after the
views were computed, as the stream drops it, and a second backfill of its date picks it up.
Every defect test works on its own copy of the warehouse.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import shutil
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from deltalake import DeltaTable, write_deltalake

from archiver.consumer import rejected_row, undecodable
from jobs.backfill import backfill
from ops.quality_commands import add_audit_arguments, add_check_arguments, run_audit, run_check
from quality.audit import AuditReport, audit
from quality.checks import run_checks
from quality.contracts import CHECKED_TABLES
from quality.findings import KAFKA_RAW, RAW_VIEWS, Finding, mismatches
from quality.store import read_audits, read_results
from simulator.synthetic import synthetic_events
from tally.quarantine import quarantined
from tally.settings import Settings
from tally.table_schemas import RAW_REJECTED_SCHEMA, raw_pageviews_schema
from tests.integration.views_support import isolated_settings, produce, write_raw

START = dt.datetime(2026, 1, 10, 22, 0, tzinfo=dt.UTC)
DAY1, DAY2 = START.date(), START.date() + dt.timedelta(days=1)
SITE = "demo.tally.local"
LATE_AT = dt.datetime(2026, 1, 10, 23, 0, tzinfo=dt.UTC)
LATE_BY = dt.timedelta(hours=3)
LATE_EVENTS_SCHEMA = pa.schema(
    [
        ("query", pa.string()),
        ("batch_id", pa.int64()),
        ("recorded_at", pa.timestamp("us", tz="UTC")),
        ("watermark", pa.timestamp("us", tz="UTC")),
        ("late_rows", pa.int64()),
        ("event_date", pa.date32()),
    ]
)


def _ms(moment: dt.datetime) -> int:
    return int(moment.timestamp() * 1000)


def _late_event(template: dict[str, Any]) -> dict[str, Any]:
    """A page view queued in the browser for three hours: its event time is far behind its arrival."""
    return {
        **template,
        "event_id": "1a7e" * 8,
        "type": "pageview",
        "is_bot": False,
        "visitor_id": "late-visitor",
        "client_hash": "late-client",
        "ts_event": _ms(LATE_AT),
        "ts_sent": _ms(LATE_AT + LATE_BY),
        "ts_received": _ms(LATE_AT + LATE_BY),
        "event_time": _ms(LATE_AT),
        "event_date": DAY1,
        "engagement_ms": None,
        "load_ms": 900,
    }


def _read_back(settings: Settings) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every message in the isolated topic: where Kafka put each event."""
    topic = settings.kafka.pageviews_topic
    consumer = Consumer(
        {"bootstrap.servers": settings.kafka.servers, "group.id": "quality-test", "enable.auto.commit": False}
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        out: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + 60
        while len(out) < sum(ends.values()):
            assert time.monotonic() < deadline, f"read {len(out)} of {sum(ends.values())} messages of {topic}"
            for msg in consumer.consume(num_messages=1000, timeout=1):
                if msg.error() is None:
                    out.append((msg.partition() or 0, msg.offset() or 0, msg.value() or b""))
        return out
    finally:
        consumer.close()


def _with_positions(rows: list[dict[str, Any]], first_at: dict[str, tuple[int, int]]) -> pa.Table:
    """Raw rows as the archiver writes them: each at the first Kafka position of its event_id."""
    placed = [
        {**r, "kafka_partition": first_at[r["event_id"]][0], "kafka_offset": first_at[r["event_id"]][1]} for r in rows
    ]
    return pa.Table.from_pylist(placed, schema=raw_pageviews_schema())


def _late_events_rows(recorded: dt.datetime) -> pa.Table:
    """agg.late_events as the stream records the late event: each of its three queries counts it once."""
    rows = [
        {
            "query": q,
            "batch_id": 41,
            "recorded_at": recorded,
            "watermark": recorded - dt.timedelta(minutes=10),
            "late_rows": 1,
            "event_date": recorded.date(),
        }
        for q in ("traffic", "sessions", "ratelimit")
    ]
    return pa.Table.from_pylist(rows, schema=LATE_EVENTS_SCHEMA)


def _at(settings: Settings, home: Path) -> Settings:
    return dataclasses.replace(
        settings, home=str(home), warehouse=dataclasses.replace(settings.warehouse, path=str(home / "warehouse"))
    )


@pytest.fixture(scope="module")
def stocked(settings: Settings, kafka: str, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    iso = isolated_settings(settings, tmp_path_factory.mktemp("quality"))
    rows = synthetic_events(visits=120, start=START, span=dt.timedelta(hours=3), site_id=SITE, seed=5).to_pylist()
    late = _late_event(rows[0])
    produce(iso, rows[:60] + rows[10:20] + rows[60:] + [late])  # ten browser retries
    producer = Producer({"bootstrap.servers": iso.kafka.servers})
    producer.produce(iso.kafka.pageviews_topic, key=b"poison", value=b"not a v1 event")
    assert producer.flush(30) == 0
    first_at: dict[str, tuple[int, int]] = {}
    rejected = []
    for partition, offset, value in sorted(_read_back(iso)):
        if value == b"not a v1 event":
            letter = undecodable("not a v1 PageViewEvent", value)
            rejected.append(rejected_row(letter, iso.kafka.pageviews_topic, partition, offset))
        else:
            first_at.setdefault(json.loads(value)["event_id"], (partition, offset))
    write_raw(iso, _with_positions(rows, first_at))
    uri = iso.table_uri("raw.rejected")
    write_deltalake(uri, pa.Table.from_pylist(rejected, schema=RAW_REJECTED_SCHEMA), partition_by=["rejected_date"])
    backfill(spark, iso, start=DAY1, end=DAY2, progress=False)
    # The late event reaches raw after the stream passed its window, which dropped and counted it.
    write_raw(iso, _with_positions([late], first_at))
    late_events = _late_events_rows(LATE_AT + LATE_BY)
    write_deltalake(iso.table_uri("agg.late_events"), late_events, partition_by=["event_date"])
    late_home = tmp_path_factory.mktemp("late-state")
    shutil.copytree(Path(iso.warehouse_uri), late_home / "warehouse")
    backfill(spark, iso, start=DAY1, end=DAY1, progress=False)  # what the audit will suggest
    return {"clean": iso, "late": _at(iso, late_home), "rows": rows, "late_event": late}


@pytest.fixture
def copy_of(tmp_path: Path) -> Any:
    def copy(source: Settings) -> Settings:
        shutil.copytree(Path(source.warehouse_uri), tmp_path / "warehouse")
        return _at(source, tmp_path)

    return copy


def _failed(report: AuditReport) -> list[Finding]:
    return mismatches(report.findings)


def _audit_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_audit_arguments(parser)
    return parser.parse_args(["--from", str(DAY1), "--to", str(DAY2), *argv])


def _check_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_check_arguments(parser)
    return parser.parse_args(list(argv))


def test_a_clean_range_passes_the_audit_and_every_suite(
    stocked: dict[str, Any], copy_of: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    iso = copy_of(stocked["clean"])
    assert run_audit(_audit_args(), iso) == 0
    out = capsys.readouterr().out
    assert "OK: Kafka, raw and the views agree" in out and "10 duplicates dropped, 1 rejected, 0 unaccounted" in out
    assert run_check(_check_args("--date", str(DAY1), "--date", str(DAY2)), iso) == 0
    assert run_check(_check_args("--table", "raw.rejected", "--date", "today"), iso) == 0
    assert quarantined(iso) == []
    results = read_results(iso)
    assert results["success"].all() and set(results["table_name"]) == set(CHECKED_TABLES)
    audits = read_audits(iso)
    assert audits["success"].all() and set(audits["check"]) == {"kafka = raw", "raw = views", "sketches"}
    props = audits[(audits["subject"] == "agg.props_1d") & audits["message"].str.startswith("property events:")]
    assert set(props["partition_date"]) == {DAY1, DAY2} and (props["actual"] > 0).all(), "custom events were counted"


def test_a_late_event_outside_the_watermark_is_named_with_the_backfill_that_fixes_it(
    stocked: dict[str, Any], copy_of: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    iso = copy_of(stocked["late"])
    assert run_audit(_audit_args(), iso) == 1
    out = capsys.readouterr().out
    assert f"tally backfill --from {DAY1} --to {DAY1}" in out
    report = audit(iso, start=DAY1, end=DAY2, record=False)
    failed = _failed(report)
    assert {f.check for f in failed} == {RAW_VIEWS, "sketches"}, "Kafka and raw agree: the stream dropped it"
    traffic = [f for f in failed if f.name == "page views"]
    assert {f.subject for f in traffic} == {"agg.traffic_1m", "agg.traffic_1h", "agg.traffic_1d"}
    assert all(f.date == DAY1 and f.actual == (f.expected or 0) - 1 for f in traffic)
    assert all("late events: 1 page view of 2026-01-10 arrived more than 10 minutes" in f.message for f in traffic)
    orphan = next(f for f in failed if f.name == "page views without a visit")
    assert stocked["late_event"]["event_id"] in orphan.message
    flagged = {(q.table, q.partition_date) for q in quarantined(iso)}
    assert ("agg.traffic_1m", DAY1) in flagged and ("agg.traffic_1m", DAY2) not in flagged


def test_a_duplicated_raw_event_is_caught_by_the_suite_and_named_by_the_audit(
    stocked: dict[str, Any], copy_of: Any
) -> None:
    iso = copy_of(stocked["clean"])
    uri = iso.table_uri("raw.pageviews")
    copy = DeltaTable(uri).to_pyarrow_dataset().to_table(filter=pc.field("event_date") == DAY1).slice(5, 1)
    event_id = copy.column("event_id")[0].as_py()
    write_raw(iso, copy)
    run = run_checks(iso, dates=[DAY1], tables=["raw.pageviews"])
    (outcome,) = run.outcomes
    assert [r.check for r in outcome.failed] == ["event_id unique"] and event_id in outcome.failed[0].observed
    assert [(q.table, q.partition_date, q.checker) for q in quarantined(iso)] == [("raw.pageviews", DAY1, "suite")]
    failed = _failed(audit(iso, start=DAY1, end=DAY2))
    assert [(f.check, f.name, f.date) for f in failed] == [(KAFKA_RAW, "doubled events", DAY1)]
    assert f"{event_id} ×2" in failed[0].message
    # Repaired (one copy left), the next check run lifts the suite's quarantine.
    DeltaTable(uri).delete(f"event_id = '{event_id}'")
    write_raw(iso, copy)
    assert run_checks(iso, dates=[DAY1], tables=["raw.pageviews"]).ok
    assert [q.checker for q in quarantined(iso)] == ["audit"]


def test_a_dropped_raw_row_is_named_as_lost_and_the_views_count_more_than_raw(
    stocked: dict[str, Any], copy_of: Any
) -> None:
    iso = copy_of(stocked["clean"])
    dropped = next(
        r for r in stocked["rows"] if r["type"] == "pageview" and not r["is_bot"] and r["event_date"] == DAY1
    )
    DeltaTable(iso.table_uri("raw.pageviews")).delete(f"event_id = '{dropped['event_id']}'")
    failed = _failed(audit(iso, start=DAY1, end=DAY2))
    lost = next(f for f in failed if f.name == "lost events")
    assert lost.actual == 1 and dropped["event_id"] in lost.message and lost.date == DAY1
    offsets = next(f for f in failed if f.name == "offsets")
    assert "1 unaccounted" in offsets.message
    views = [f for f in failed if f.name == "page views"]
    assert views and all(f.actual == (f.expected or 0) + 1 and "rows lost from raw" in f.message for f in views)


def test_a_corrupted_aggregate_is_named_by_table_and_a_negative_count_fails_its_suite(
    stocked: dict[str, Any], copy_of: Any
) -> None:
    iso = copy_of(stocked["clean"])
    hours = DeltaTable(iso.table_uri("agg.traffic_1h"))
    edited = hours.update(
        predicate=f"dimension = 'all' AND event_date = '{DAY1}'", updates={"pageviews": "pageviews + 7"}
    )
    hours.update(predicate=f"dimension = 'page' AND event_date = '{DAY1}'", new_values={"pageviews": -1})
    failed = _failed(audit(iso, start=DAY1, end=DAY2))
    assert [(f.subject, f.name, f.date) for f in failed] == [("agg.traffic_1h", "page views", DAY1)]
    assert failed[0].actual == (failed[0].expected or 0) + 7 * edited["num_updated_rows"]
    (outcome,) = run_checks(iso, dates=[DAY1], tables=["agg.traffic_1h"]).outcomes
    assert [r.check for r in outcome.failed] == ["pageviews >= 0"]


def test_a_props_row_no_counted_event_carried_is_named_by_the_audit_and_a_key_past_ingests_bound_fails_the_suite(
    stocked: dict[str, Any], copy_of: Any
) -> None:
    iso = copy_of(stocked["clean"])
    uri = iso.table_uri("agg.props_1d")
    first = DeltaTable(uri).to_pyarrow_dataset().to_table(filter=pc.field("event_date") == DAY1).slice(0, 1)
    assert first.num_rows == 1, "the synthetic custom events carry properties"

    def edited(column: str, text: str) -> pa.Table:
        index = first.schema.get_field_index(column)
        return first.set_column(index, column, pa.array([text], type=first.schema.field(column).type))

    # A value only a bot sent (the view must not count it) and a key longer than ingest lets through.
    write_deltalake(uri, pa.concat_tables([edited("value", "bot-plan"), edited("key", "k" * 65)]), mode="append")
    failed = _failed(audit(iso, start=DAY1, end=DAY2))
    assert {(f.subject, f.name, f.date) for f in failed} == {
        ("agg.props_1d", "property events", DAY1),
        ("agg.props_1d", "property rows not in raw", DAY1),
    }
    extra = next(f for f in failed if f.name == "property rows not in raw")
    assert extra.actual == 2 and "bot-plan" in extra.message and extra.hint
    (outcome,) = run_checks(iso, dates=[DAY1], tables=["agg.props_1d"]).outcomes
    assert [r.check for r in outcome.failed] == ["key_length in [1, 64]"]
    flagged = {(q.table, q.partition_date, q.checker) for q in quarantined(iso)}
    assert flagged == {("agg.props_1d", DAY1, "audit"), ("agg.props_1d", DAY1, "suite")}
