"""A backfill over dates whose raw rows are gone keeps their views: real Spark and Delta.

Three dates of two sites are written to raw.pageviews and backfilled. Then the raw rows of the
middle date are deleted, as retention does, and those of one site on the last date. The tests run
in file order, each on the tables the one before left.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import threading
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from deltalake import DeltaTable

import jobs.backfill
import jobs.delta_sink
import jobs.write_pool
from jobs.backfill import backfill
from ops.job_commands import run_backfill
from simulator.synthetic import synthetic_events
from tally.settings import Settings
from tally.tables import BACKFILL_VIEWS, SESSIONS, TRAFFIC_1D, TRAFFIC_1M, ViewSpec
from tests.integration.views_support import write_raw

DAYS = [dt.date(2026, 1, 1), dt.date(2026, 1, 2), dt.date(2026, 1, 3)]
SITES = ("a.test", "b.test")
Snapshot = dict[tuple[ViewSpec, dt.date, str], pa.Table]


def view_rows(table: pa.Table, spec: ViewSpec, day: dt.date, site: str) -> pa.Table:
    """One date and site of a view's rows, in key order."""
    mask = pc.and_(pc.equal(table[spec.partition_by], pa.scalar(day)), pc.equal(table["site_id"], site))
    return table.filter(mask).sort_by([(k, "ascending") for k in spec.keys])


def snapshot(settings: Settings) -> Snapshot:
    """Every view's rows by date and site, each table read once with delta-rs."""
    tables = {spec: DeltaTable(settings.table_uri(spec.table)).to_pyarrow_table() for spec in BACKFILL_VIEWS}
    return {
        (spec, day, site): view_rows(tables[spec], spec, day, site)
        for spec in BACKFILL_VIEWS
        for day in DAYS
        for site in SITES
    }


def delete_raw(settings: Settings, predicate: str) -> None:
    """Delete raw rows as `tally maintain --retention-days` does (delta-rs)."""
    assert DeltaTable(settings.table_uri("raw.pageviews")).delete(predicate)["num_deleted_rows"] > 0


@pytest.fixture(scope="module")
def retained(settings: Settings, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    home = tmp_path_factory.mktemp("backfill-empty")
    iso = dataclasses.replace(
        settings, home=str(home), warehouse=dataclasses.replace(settings.warehouse, path=str(home / "warehouse"))
    )
    for seed, (day, site) in enumerate((day, site) for day in DAYS for site in SITES):
        noon = dt.datetime.combine(day, dt.time(12), dt.UTC)
        write_raw(iso, synthetic_events(visits=20, start=noon, span=dt.timedelta(hours=2), site_id=site, seed=seed))
    backfill(spark, iso, start=DAYS[0], end=DAYS[-1], progress=False)
    before = snapshot(iso)
    assert all(len(before[TRAFFIC_1D, day, site]) for day in DAYS for site in SITES)
    delete_raw(iso, f"event_date = '{DAYS[1]}'")
    delete_raw(iso, f"event_date = '{DAYS[2]}' AND site_id = '{SITES[1]}'")
    return {"settings": iso, "before": before}


def versions(settings: Settings) -> dict[str, int]:
    return {spec.table: DeltaTable(settings.table_uri(spec.table)).version() for spec in BACKFILL_VIEWS}


def test_a_site_backfill_keeps_the_dates_that_site_has_no_raw_rows_on(retained: dict[str, Any], spark: Any) -> None:
    # The last date still has raw rows of the other site: for this site it is empty all the same.
    iso: Settings = retained["settings"]
    written = versions(iso)
    done = backfill(spark, iso, start=DAYS[1], end=DAYS[2], site_id=SITES[1], progress=False)
    assert done.replaced_dates == [] and done.kept_dates == DAYS[1:]
    assert versions(iso) == written  # not a commit
    assert snapshot(iso) == retained["before"]


def test_a_backfill_keeps_the_views_of_a_date_without_raw_rows_and_names_it(
    retained: dict[str, Any], spark: Any, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    iso: Settings = retained["settings"]
    before: Snapshot = retained["before"]
    assert run_backfill(iso, start=DAYS[0], end=DAYS[2], site_id=None, dry_run=True, progress=False) == 0
    planned = capsys.readouterr().out
    assert f"  {DAYS[1]}: no raw events, views would be kept" in planned
    assert (
        f"in 1 Spark job of at most 2,000,000 raw events each (spark.backfill_chunk_events): {DAYS[0]} .. {DAYS[2]}"
        in planned
    )

    with caplog.at_level(logging.INFO, logger="tally.jobs.backfill"):
        done = backfill(spark, iso, start=DAYS[0], end=DAYS[2], progress=False)
    assert done.replaced_dates == [DAYS[0], DAYS[2]] and done.kept_dates == [DAYS[1]]
    kept = [r.getMessage() for r in caplog.records if getattr(r, "fields", {}).get("date") == str(DAYS[1])]
    assert kept == ["no raw events, views kept"]
    after = snapshot(iso)
    for spec in BACKFILL_VIEWS:
        for site in SITES:
            assert after[spec, DAYS[1], site].equals(before[spec, DAYS[1], site]), f"{spec.table} {site} changed"
            assert len(after[spec, DAYS[0], site]) == len(before[spec, DAYS[0], site]), f"{spec.table} {site}"
        # Every site's backfill goes by date: the last date had raw rows, so it is all replaced.
        assert len(after[spec, DAYS[2], SITES[0]]) == len(before[spec, DAYS[2], SITES[0]]), spec.table
        assert not len(after[spec, DAYS[2], SITES[1]]), spec.table


def test_a_backfill_with_allow_empty_empties_the_views_of_a_date_without_raw_rows(
    retained: dict[str, Any], spark: Any
) -> None:
    iso: Settings = retained["settings"]
    done = backfill(spark, iso, start=DAYS[1], end=DAYS[1], allow_empty=True, progress=False)
    assert done.replaced_dates == [DAYS[1]] and done.kept_dates == []
    after = snapshot(iso)
    assert not any(len(after[spec, DAYS[1], site]) for spec in BACKFILL_VIEWS for site in SITES)
    assert all(len(after[TRAFFIC_1D, DAYS[0], site]) for site in SITES)


def test_a_backfill_of_named_views_writes_those_alone(
    retained: dict[str, Any], spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # The first date still has both sites' raw rows, so its views are what the first backfill wrote.
    iso: Settings = retained["settings"]
    written = versions(iso)
    done = run_backfill(iso, start=DAYS[0], end=DAYS[0], site_id=None, dry_run=False, progress=False, views=[SESSIONS])
    assert done == 0
    assert f"replaced 1 date in: {SESSIONS.table}\n" in capsys.readouterr().out
    after = versions(iso)
    assert [table for table in after if after[table] != written[table]] == [SESSIONS.table]
    rows = snapshot(iso)
    assert all(rows[SESSIONS, DAYS[0], site].equals(retained["before"][SESSIONS, DAYS[0], site]) for site in SITES)


def test_after_a_view_fails_the_view_under_way_stops_between_its_runs_of_dates(
    retained: dict[str, Any], spark: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The dates with raw rows are DAYS[0] and DAYS[2]: two runs of dates, one replace each. The
    # minutes and the sessions are written first, together; the minutes fail once the sessions have
    # replaced their first run, and the sessions stop before their second.
    iso: Settings = retained["settings"]
    real, pool = jobs.delta_sink.replace_dates, jobs.write_pool.write_each
    calls: list[tuple[str, dt.date]] = []
    first_run_done = threading.Event()
    stops: list[threading.Event] = []  # the backfill's stop, as it hands it to the write pool

    def write_each(*args: Any, stop: threading.Event, **kwargs: Any) -> None:
        stops.append(stop)
        pool(*args, stop=stop, **kwargs)

    def replace(frame: Any, spec: ViewSpec, settings: Settings, *, start: dt.date, end: dt.date, site_id: Any) -> None:
        calls.append((spec.table, start))
        if spec == TRAFFIC_1M:
            assert first_run_done.wait(120)
            raise RuntimeError("disk full")
        real(frame, spec, settings, start=start, end=end, site_id=site_id)
        if spec == SESSIONS:
            first_run_done.set()
            assert stops[0].wait(120)  # the minutes' failure has reached the write pool

    monkeypatch.setattr(jobs.backfill, "replace_dates", replace)
    monkeypatch.setattr(jobs.backfill, "write_each", write_each)
    written = versions(iso)
    with caplog.at_level(logging.INFO, logger="tally.jobs.backfill"), pytest.raises(RuntimeError, match="disk full"):
        backfill(spark, iso, start=DAYS[0], end=DAYS[2], progress=False)
    assert sorted(calls) == [(SESSIONS.table, DAYS[0]), (TRAFFIC_1M.table, DAYS[0])]  # begun in either order
    logged = {(r.getMessage(), getattr(r, "fields", {}).get("view")) for r in caplog.records}
    assert ("view failed", TRAFFIC_1M.table) in logged and ("view stopped", SESSIONS.table) in logged
    after = versions(iso)
    assert [table for table in after if after[table] != written[table]] == [SESSIONS.table]  # its first run alone
