"""bench.dashboard times both sides alike: a fresh reader's first answer alone, then warm answers."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable, write_deltalake

import bench.dashboard
from bench.dashboard import RawScans, raw_scans, timed
from simulator.synthetic import synthetic_events
from tally.settings import Settings, load_settings
from tally.storage import open_table


def test_the_first_answer_is_reported_alone_and_the_warm_sample_leaves_it_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = iter([0.0, 1.0, 1.0, 1.010, 1.010, 1.030, 1.030, 1.040])  # a 1,000 ms cold read, then 10, 20, 10
    monkeypatch.setattr("bench.dashboard.time.perf_counter", lambda: next(clock))
    readers: list[int] = []

    def fresh() -> Any:
        readers.append(1)
        return lambda: None

    timing = timed(fresh, runs=3)
    assert len(readers) == 1, "one reader answers the first read and the warm ones"
    assert timing.first == pytest.approx(1000)
    assert timing.p50 == pytest.approx(10) and timing.p95 == pytest.approx(20)


@pytest.fixture
def raw_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("TALLY_HOME", str(tmp_path))
    monkeypatch.setenv("TALLY_WAREHOUSE__PATH", str(tmp_path / "warehouse"))
    settings = load_settings()
    day = dt.datetime(2026, 1, 5, tzinfo=dt.UTC)
    events = synthetic_events(visits=200, start=day, span=dt.timedelta(hours=12), site_id=bench.dashboard.SITE)
    write_deltalake(settings.table_uri("raw.pageviews"), events, partition_by=["event_date"])
    return settings, events


def test_the_raw_scans_keep_one_snapshot_and_one_connection_like_the_panels(
    raw_table: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, events = raw_table
    opened: list[str] = []

    def counted_open(settings: Settings, name: str) -> DeltaTable:
        opened.append(name)
        return open_table(settings, name)

    monkeypatch.setattr("query.aggregates.open_table", counted_open)
    scans = raw_scans(settings, 1, dt.date(2026, 1, 5))
    first = scans["KPIs (HLL union, digests)"]()
    for question in scans.values():
        question()
    assert opened == ["raw.pageviews"], "the table is opened once, by the first question"
    humans = events.filter(~events["is_bot"].to_numpy(zero_copy_only=False))
    assert first[0][1] == len(set(humans["visitor_id"].to_pylist())), "and the answer is exact"


def test_each_raw_reader_starts_cold(raw_table: Any) -> None:
    settings, _ = raw_table
    assert RawScans(settings).snapshots is not RawScans(settings).snapshots
