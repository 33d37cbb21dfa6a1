"""The streaming views against a backfill of the same events: real Kafka, Spark and Delta.

Events are produced straight to an isolated topic with event times on a past evening that
crosses midnight, with retried duplicates mixed in; custom events carry properties. A final event of another site, hours
later, moves the watermark on so that every visit closes. Then one late event arrives.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F

from jobs import traffic
from jobs.backfill import backfill
from jobs.backfill_raw import raw_events, raw_rows
from jobs.streaming import ViewJob, start
from ops.job_commands import run_backfill
from simulator.synthetic import synthetic_events
from tally.dimensions import AUDIENCE_DIMENSIONS, visit_column
from tally.settings import Settings
from tally.sketches import digest_from_values, digest_quantiles, union_estimate
from tally.tables import (
    ACTIVE_5M,
    EVENTS,
    LATE_EVENTS,
    PROPS_1D,
    RATELIMIT,
    SESSIONS,
    TRAFFIC_1D,
    TRAFFIC_1H,
    TRAFFIC_1M,
    VISITS_1D,
    VISITS_1H,
    ViewSpec,
)
from tests.integration.views_support import assert_same_rows, isolated_settings, produce, view, write_raw

START = dt.datetime(2026, 1, 10, 22, 30, tzinfo=dt.UTC)
SITE = "demo.tally.local"
COMPARED = (TRAFFIC_1M, TRAFFIC_1H, TRAFFIC_1D, ACTIVE_5M, SESSIONS, EVENTS, VISITS_1H, VISITS_1D, RATELIMIT, PROPS_1D)
PLANS = ("free", "pro", "team")


def with_props(events: pa.Table) -> pa.Table:
    """The events with properties on every custom event: a few plans, and a step number."""
    rows = events.to_pylist()
    for i, row in enumerate(rows):
        if row["type"] == "event":
            row["props"] = {"plan": PLANS[i % len(PLANS)], "step": str(i % 5)}
    return pa.Table.from_pylist(rows, schema=events.schema)


def _event(template: dict[str, Any], *, event_id: str, site: str, at: dt.datetime, visitor: str) -> dict[str, Any]:
    ms = int(at.timestamp() * 1000)
    return {
        **template,
        "event_id": event_id,
        "site_id": site,
        "visitor_id": visitor,
        "client_hash": visitor,
        "type": "pageview",
        "is_bot": False,
        "ts_event": ms,
        "ts_sent": ms,
        "ts_received": ms,
        "event_time": ms,
        "event_date": at.date(),
    }


def _drain(job: ViewJob, settings: Settings, until: Any, what: str) -> None:
    """Run micro-batches (watermark moves need a batch of their own) until ``until()`` holds."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        job.process_all_available()
        if until():
            return
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def streamed(
    settings: Settings, kafka: str, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    iso = isolated_settings(settings, tmp_path_factory.mktemp("views"))
    events = with_props(synthetic_events(visits=250, start=START, span=dt.timedelta(hours=2), site_id=SITE, seed=11))
    rows = [{**row, "props": dict(row["props"] or [])} for row in events.to_pylist()]
    closer = _event(rows[-1], event_id="closer-1", site="closer.test", at=START + dt.timedelta(hours=5), visitor="c1")
    # Retries: 20 events sent twice (same event_id), right behind the originals.
    produce(iso, rows[:120] + rows[100:120] + rows[120:] + [closer])
    job = start(iso, checkpoint_root=str(Path(iso.home) / "checkpoints"))
    try:
        _drain(job, iso, lambda: _closed_sessions(iso) > 0, "visits to close")
        job.process_all_available()  # and whatever the watermark move released after that
        late = _event(rows[0], event_id="late-1", site=SITE, at=START + dt.timedelta(minutes=30), visitor="late")
        produce(iso, [late])
        _drain(job, iso, lambda: _late_rows(job, iso) >= 3, "the late event to be counted by the page view queries")
    finally:
        job.stop()
    stream_views = {spec: view(iso, spec.table) for spec in (*COMPARED, LATE_EVENTS)}
    write_raw(iso, events)
    write_raw(iso, pa.Table.from_pylist([closer], schema=events.schema))
    yield {"settings": iso, "stream": stream_views, "events": events, "late": late}


def _closed_sessions(settings: Settings) -> int:
    try:
        return len(view(settings, SESSIONS.table))
    except Exception:  # the table does not exist until the first visit closes
        return 0


def _late_rows(job: ViewJob, settings: Settings) -> int:
    job.late.flush(job.spark, settings)
    try:
        return int(view(settings, LATE_EVENTS.table)["late_rows"].sum())
    except Exception:
        return 0


def _only_site(frame: Any) -> Any:
    return frame[frame["site_id"] == SITE]


@pytest.fixture(scope="module")
def backfilled(streamed: dict[str, Any], spark: Any) -> list[dict[ViewSpec, pd.DataFrame]]:
    """Every compared view as a backfill of the streamed events wrote it, then as a second one
    rewrote it: a rerun replaces its dates, so it must leave the same rows. (Each view's test
    used to run a backfill of its own, nine in all, each over the tables the one before wrote.)"""
    # One date per chunk: the events straddle midnight, so the chunk boundary must not split visits.
    iso: Settings = streamed["settings"]
    one_day_chunks = dataclasses.replace(iso, spark=dataclasses.replace(iso.spark, backfill_chunk_days=1))
    runs = []
    for _ in range(2):
        backfill(spark, one_day_chunks, start=START.date(), end=START.date() + dt.timedelta(days=1), progress=False)
        runs.append({spec: view(iso, spec.table) for spec in COMPARED})
    return runs


@pytest.mark.parametrize("spec", COMPARED, ids=lambda s: s.table)
def test_stream_computed_views_equal_a_backfill_of_the_same_raw_events(
    streamed: dict[str, Any], backfilled: list[dict[ViewSpec, pd.DataFrame]], spec: ViewSpec
) -> None:
    for batch in backfilled:  # the first backfill, and the rerun over its tables
        assert_same_rows(_only_site(streamed["stream"][spec]), _only_site(batch[spec]), spec.keys, spec.table)


def _visits_by_pandas(events: pd.DataFrame, gap: dt.timedelta) -> pd.DataFrame:
    """The truth for agg.events, computed apart from Spark: each human event with its visit's id,
    its place in the visit and its visit's first-event attributes, for visits with a page view."""
    humans = events[~events["is_bot"]].sort_values(["site_id", "visitor_id", "event_time", "event_id"])
    humans = humans.drop_duplicates("event_id").copy()
    by_visitor = humans.groupby(["site_id", "visitor_id"])["event_time"]
    starts = by_visitor.diff().isna() | (by_visitor.diff() >= gap.total_seconds() * 1000)
    humans["visit_no"] = starts.cumsum()
    visit = humans.groupby("visit_no")
    humans["visit_seq"] = visit.cumcount() + 1
    # The first event's values, None included (groupby's "first" would skip a None).
    firsts = humans[humans["visit_seq"] == 1].set_index("visit_no")
    humans["visit_id"] = humans["visit_no"].map(firsts["event_id"])
    for column in AUDIENCE_DIMENSIONS:
        humans[visit_column(column)] = humans["visit_no"].map(firsts[column])
    pageviews = humans["type"].eq("pageview").groupby(humans["visit_no"]).transform("sum")
    return humans[pageviews > 0]


def test_every_event_of_a_visit_carries_its_visits_id_place_and_attributes(streamed: dict[str, Any]) -> None:
    iso: Settings = streamed["settings"]
    truth = _visits_by_pandas(streamed["events"].to_pandas(), iso.spark.session_gap)
    truth = truth[truth["site_id"] == SITE].set_index("event_id")
    stored = _only_site(streamed["stream"][EVENTS]).set_index("event_id")
    assert sorted(stored.index) == sorted(truth.index), "agg.events holds each event of a counted visit once"
    columns = ["visitor_id", "visit_id", "visit_seq", *(visit_column(c) for c in AUDIENCE_DIMENSIONS)]
    differing = [i for i in truth.index if list(stored.loc[i, columns]) != list(truth.loc[i, columns])]
    assert not differing, f"{len(differing)} events differ, e.g. {differing[0]}: {stored.loc[differing[0], columns]}"
    sessions = _only_site(streamed["stream"][SESSIONS])
    first = stored[stored["visit_seq"] == 1]
    assert len(first) == len(sessions)  # one first event a visit
    entry = dict(
        zip(zip(sessions["visitor_id"], sessions["session_start"], strict=True), sessions["entry_page"], strict=True)
    )
    assert all(entry[(row.visitor_id, row.visit_start)] == row.visit_entry_page for row in stored.itertuples()), (
        "each event carries its visit's entry page"
    )


def test_views_drop_retried_duplicates_and_exclude_bots(streamed: dict[str, Any]) -> None:
    events = streamed["events"].to_pandas()
    humans = events[(~events["is_bot"]) & (events["type"] == "pageview")]
    totals = _only_site(streamed["stream"][TRAFFIC_1D])
    assert totals[totals["dimension"] == "all"]["pageviews"].sum() == len(humans)
    pages = totals[totals["dimension"] == "page"].groupby("value")["pageviews"].sum().to_dict()
    assert pages == humans.groupby("path").size().to_dict()


@pytest.mark.parametrize("spec", (TRAFFIC_1M, TRAFFIC_1H, TRAFFIC_1D), ids=lambda s: s.table)
def test_percentile_digests_are_written_for_the_site_total_only(streamed: dict[str, Any], spec: ViewSpec) -> None:
    # Engagement and load percentiles are reported for the whole site; no report reads a page's or a
    # source's, so those rows carry none (nor does their state in the stream).
    rows = _only_site(streamed["stream"][spec])
    totals, others = rows[rows["dimension"] == "all"], rows[rows["dimension"] != "all"]
    assert len(others) > 0 and totals["load_ms_p50_p90_p99"].notna().any()
    assert totals["engagement_ms_p50_p90_p99"].notna().any()
    assert others["load_ms_p50_p90_p99"].isna().all() and others["engagement_ms_p50_p90_p99"].isna().all()


def test_a_roll_up_merges_the_site_totals_digests_only_even_from_rows_written_before(spark: Any) -> None:
    # Minute rows written before the change carry a digest on every dimension; the hour takes only the total's.
    digest = digest_from_values([120.0, 340.0, 560.0])
    minute = dt.datetime(2026, 1, 10, 9, 5)
    rows = [
        (SITE, minute + dt.timedelta(minutes=m), dimension, value, 1, 0, None, digest, digest)
        for m in range(2)
        for dimension, value in (("all", ""), ("page", "/"))
    ]
    columns = "site_id string, window_start timestamp, dimension string, value string, pageviews long, events long"
    schema = f"{columns}, visitors_sketch binary, engagement_ms_digest binary, load_ms_digest binary"
    hours = {r["dimension"]: r for r in traffic.roll_up(spark.createDataFrame(rows, schema), "hour").collect()}
    assert hours["all"]["pageviews"] == 2 == hours["page"]["pageviews"]
    assert digest_quantiles(hours["all"]["load_ms_digest"], [0.5]) == [340.0]
    assert hours["page"]["load_ms_digest"] is None and hours["page"]["engagement_ms_digest"] is None


def test_a_late_event_is_counted_by_every_query_and_a_backfill_includes_it(
    streamed: dict[str, Any], spark: Any
) -> None:
    iso: Settings = streamed["settings"]
    late = streamed["stream"][LATE_EVENTS]
    # The props and vitals queries may count the late page view too (their deduplication drops it), or filter it
    # out first.
    every = {"props", "ratelimit", "sessions", "traffic", "vitals"}
    assert {"ratelimit", "sessions", "traffic"} <= set(late["query"]) <= every
    assert set(late["late_rows"]) == {1}
    minute = START + dt.timedelta(minutes=30)  # the late event's minute
    before = streamed["stream"][TRAFFIC_1M]
    before = before[
        (before["site_id"] == SITE) & (before["dimension"] == "all") & (before["window_start"] == pd.Timestamp(minute))
    ]
    write_raw(iso, pa.Table.from_pylist([streamed["late"]], schema=streamed["events"].schema))
    backfill(spark, iso, start=START.date(), end=START.date(), progress=False)
    after = view(iso, TRAFFIC_1M.table)
    after = after[
        (after["site_id"] == SITE) & (after["dimension"] == "all") & (after["window_start"] == pd.Timestamp(minute))
    ]
    assert int(after["pageviews"].sum()) == int(before["pageviews"].sum()) + 1
    visits = view(iso, SESSIONS.table)
    assert (visits["visitor_id"] == "late").sum() == 1


def test_python_datasketches_reads_the_hll_sketches_spark_wrote(streamed: dict[str, Any], spark: Any) -> None:
    iso: Settings = streamed["settings"]
    raw = DeltaTable(iso.table_uri("raw.pageviews")).to_pandas(
        columns=["site_id", "visitor_id", "is_bot", "event_date"]
    )
    humans = raw[(~raw["is_bot"]) & (raw["site_id"] == SITE)]  # the independent count: delta-rs over raw
    days = spark.read.format("delta").load(iso.table_uri(TRAFFIC_1D.table)).where(f"site_id = '{SITE}'")
    totals = days.where("dimension = 'all'").groupBy("event_date")
    by_spark = {r[0]: r[1] for r in totals.agg(F.hll_sketch_estimate(F.hll_union_agg("visitors_sketch"))).collect()}
    by_python = _only_site(view(iso, TRAFFIC_1D.table))
    by_python = by_python[by_python["dimension"] == "all"]
    table = DeltaTable(iso.table_uri(TRAFFIC_1D.table)).to_pandas()
    totals_rows = table[(table["site_id"] == SITE) & (table["dimension"] == "all")]
    sketches = totals_rows.groupby("event_date")["visitors_sketch"].apply(list).to_dict()
    for row in by_python.itertuples():
        exact = humans[humans["event_date"] == row.event_date]["visitor_id"].nunique()
        estimate = union_estimate(sketches[row.event_date])
        assert round(estimate.value) == by_spark[row.event_date]
        assert estimate.lower <= exact <= estimate.upper, f"{row.event_date}: exact {exact} outside {estimate.label()}"


def test_a_dry_run_backfill_reports_raw_events_per_date_and_writes_nothing(
    streamed: dict[str, Any], spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    iso: Settings = streamed["settings"]
    versions = {spec: DeltaTable(iso.table_uri(spec.table)).version() for spec in COMPARED}
    code = run_backfill(iso, start=START.date(), end=START.date(), site_id=SITE, dry_run=True, progress=False)
    out = capsys.readouterr().out
    assert code == 0
    raw = DeltaTable(iso.table_uri("raw.pageviews")).to_pandas(columns=["site_id", "event_date"])
    expected = int(((raw["site_id"] == SITE) & (raw["event_date"] == START.date())).sum())
    assert f"{START.date()}: {expected:,} events" in out and "would replace" in out
    assert {spec: DeltaTable(iso.table_uri(spec.table)).version() for spec in COMPARED} == versions


def test_a_big_backfill_job_caches_its_events_under_the_raised_shuffle_partitions_and_aggregate_groups(
    streamed: dict[str, Any], spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cache is planned when it is declared: partitions raised after it would not reach the
    # cached events' deduplication, and 10M events ran out of heap that way.
    import jobs.backfill as backfill_module
    import jobs.backfill_chunks as chunks_module

    iso: Settings = streamed["settings"]
    day = dt.timedelta(days=1)
    stored = raw_rows(spark, iso, START.date() - day, START.date() + day, None).count()
    monkeypatch.setattr(chunks_module, "EVENTS_PER_SHUFFLE_PARTITION", stored // 3)  # so 3 or 4 partitions
    session_partitions = spark.conf.get("spark.sql.shuffle.partitions")
    expected = chunks_module.shuffle_partitions_for(stored, int(session_partitions))
    assert expected > int(session_partitions)
    in_force: list[str] = []
    cached = backfill_module._cached

    groups = "spark.sql.objectHashAggregate.sortBased.fallbackThreshold"
    session_groups = spark.conf.get(groups)
    groups_in_force: list[str] = []

    @contextmanager
    def recording(frame: Any) -> Iterator[Any]:
        in_force.append(spark.conf.get("spark.sql.shuffle.partitions"))
        groups_in_force.append(spark.conf.get(groups))
        with cached(frame) as kept:
            yield kept

    monkeypatch.setattr(backfill_module, "_cached", recording)
    # The minutes and the hours rolled up from them: the events' cache, and a view's (the minutes
    # are read twice), without writing every view again.
    backfill(spark, iso, start=START.date(), end=START.date(), progress=False, views=(TRAFFIC_1M, TRAFFIC_1H))
    assert len(in_force) == 2
    assert in_force and set(in_force) == {str(expected)}  # the events' cache first, then the views'
    assert set(groups_in_force) == {str(chunks_module.OBJECT_AGGREGATE_GROUPS)} != {session_groups}
    assert spark.conf.get("spark.sql.shuffle.partitions") == session_partitions  # restored after
    assert spark.conf.get(groups) == session_groups


def test_a_backfill_reads_only_the_fields_the_views_use_from_raw(streamed: dict[str, Any], spark: Any) -> None:
    # The raw table's wide fields (url, referrer, title) are for ad-hoc queries; carried
    # through the backfill's deduplication and cache they cost a third of a 3-day job's time.
    from jobs.views import VIEW_FIELDS

    iso: Settings = streamed["settings"]
    rows = raw_rows(spark, iso, START.date(), START.date(), None)
    assert {"url", "referrer", "title", "props"} <= set(rows.columns)  # the table does hold them
    events = raw_events(rows)
    assert events.columns == [*VIEW_FIELDS, "event_date", "event_ts"]
    before = spark.conf.get("spark.sql.maxMetadataStringLength")
    spark.conf.set("spark.sql.maxMetadataStringLength", "100000")  # the plan's ReadSchema, untruncated
    try:
        plan = events._jdf.queryExecution().executedPlan().toString()
    finally:
        spark.conf.set("spark.sql.maxMetadataStringLength", before)
    scans = [line.split("ReadSchema: struct<", 1)[1] for line in plan.splitlines() if "ReadSchema: struct<" in line]
    assert len(scans) == 1, plan
    assert set(re.findall(r"(?:^|,)(\w+):", scans[0])) == set(VIEW_FIELDS)  # event_date is the partition


@pytest.mark.parametrize("most", [100, 3], ids=["few duplicates", "more than most"])
def test_a_backfill_keeps_one_row_of_each_duplicated_event_id_in_raw(
    streamed: dict[str, Any], spark: Any, monkeypatch: pytest.MonkeyPatch, most: int
) -> None:
    # The archiver drops retries only within its window; later ones reach raw.pageviews twice.
    import jobs.backfill_raw as raw_module

    monkeypatch.setattr(raw_module, "MAX_DUPLICATED_IDS", most)  # 3: by a shuffle of every row instead
    iso: Settings = streamed["settings"]
    rows = raw_rows(spark, iso, START.date(), START.date(), None)
    unique = raw_events(rows)
    assert unique.count() == rows.count() == rows.select("event_id").distinct().count()  # none to drop
    retried = sorted(r["event_id"] for r in rows.select("event_id").collect())[:7]
    twice = rows.unionByName(rows.where(F.col("event_id").isin(retried)))
    events = raw_events(twice)
    assert twice.count() == rows.count() + 7
    assert sorted(r["event_id"] for r in events.select("event_id").collect()) == sorted(
        r["event_id"] for r in rows.select("event_id").collect()
    )
    assert events.columns == unique.columns
