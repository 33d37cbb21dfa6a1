"""Operating the raw archive: forget a visitor (really gone from storage), maintenance, SQL, lag."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from jobs.backfill import backfill
from tally.settings import Settings
from tests.events import page_view
from tests.integration.conftest import wait_for


def tally(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tally", *args], capture_output=True, text=True, timeout=300, env=dict(os.environ)
    )


def produce(settings: Settings, site: str, visitor: str, count: int) -> list[str]:
    producer = Producer({"bootstrap.servers": settings.kafka.servers})
    ids = []
    for _ in range(count):
        e = page_view(site, visitor_id=visitor, path="/f")
        producer.produce(settings.kafka.pageviews_topic, key=visitor.encode(), value=e.to_json())
        ids.append(e.event_id)
    producer.flush(10)
    return ids


def visitor_rows_in_every_file(table_dir: Path, visitor: str) -> int:
    """Rows of the visitor in any parquet file on disk, referenced by the table or not."""
    return sum(
        pq.read_table(f, columns=["visitor_id"]).column("visitor_id").to_pylist().count(visitor)
        for f in table_dir.rglob("*.parquet")
    )


def rows_of(settings: Settings, visitor: str) -> int:
    try:
        table = DeltaTable(settings.table_uri("raw.pageviews")).to_pyarrow_table(columns=["visitor_id"])
    except Exception:
        return 0
    return int(table.column("visitor_id").to_pylist().count(visitor))


def backfill_day(spark: SparkSession, settings: Settings, day: str) -> None:
    """The views of ``day``, by the test session's own Spark: the `tally backfill` command itself runs in
    test_scale_s3.py, and a JVM of its own here would only add its start-up."""
    date = dt.date.fromisoformat(day)
    backfill(spark, settings, start=date, end=date, progress=False)


@dataclass(frozen=True)
class Forgettable:
    """A visitor to forget and one to keep on the first site, a site to forget: in raw.pageviews
    and in today's views."""

    site: str
    forgotten: str
    kept: str
    gone_site: str


@pytest.fixture(scope="module")
def forgettable(settings: Settings, archiver: None, spark: SparkSession) -> Forgettable:
    """Their events archived and today's views backfilled once, for both forget tests (a forget
    of the visitor leaves the gone site's rows, and a forget of the site the visitors')."""
    given = Forgettable(
        settings.sites[0].site_id, uuid.uuid4().hex, uuid.uuid4().hex, f"gone-{uuid.uuid4().hex[:8]}.example"
    )
    day = dt.datetime.now(dt.UTC).date().isoformat()  # the events' day, even if the test runs past midnight
    produce(settings, given.site, given.forgotten, 30)
    produce(settings, given.site, given.kept, 20)
    produce(settings, given.gone_site, uuid.uuid4().hex, 12)
    raw = settings.table_uri("raw.pageviews")
    archived = lambda: (  # noqa: E731
        rows_of(settings, given.forgotten) == 30
        and rows_of(settings, given.kept) == 20
        and site_rows(raw, given.gone_site) == 12
    )
    wait_for(archived, 60, "both visitors and the site to forget in raw")
    backfill_day(spark, settings, day)
    return given


def test_forgetting_a_visitor_removes_their_rows_from_storage_and_keeps_others(
    settings: Settings, forgettable: Forgettable
) -> None:
    site, forgotten, kept = forgettable.site, forgettable.forgotten, forgettable.kept
    table_dir = Path(settings.table_uri("raw.pageviews"))
    assert visitor_rows_in_every_file(table_dir, forgotten) == 30
    # The views hold the visitor too: agg.sessions carries visitor ids.
    sessions_dir = Path(settings.table_uri("agg.sessions"))
    assert visitor_rows_in_every_file(sessions_dir, forgotten) >= 1

    result = tally("forget", "--site", site, "--visitor", forgotten)
    assert result.returncode == 0, result.stderr
    assert "raw.pageviews: 30 rows deleted" in result.stdout and "retention" in result.stdout
    assert rows_of(settings, forgotten) == 0 and rows_of(settings, kept) == 20
    assert visitor_rows_in_every_file(table_dir, forgotten) == 0  # the old files are gone, not just unreferenced
    assert visitor_rows_in_every_file(sessions_dir, forgotten) == 0  # the views were rebuilt without them
    assert visitor_rows_in_every_file(sessions_dir, kept) >= 1
    assert "running" in [
        line.split()[1] for line in tally("status").stdout.splitlines() if line.startswith("archiver")
    ]  # paused for the VACUUM, then restarted


def site_rows(uri: str, site: str) -> int:
    """Rows of ``site`` in a Delta table (0 when the table does not exist yet)."""
    try:
        column = DeltaTable(uri).to_pyarrow_table(columns=["site_id"]).column("site_id").to_pylist()
    except Exception:
        return 0
    return int(column.count(site))


def test_forgetting_a_site_deletes_its_events_and_its_views_and_keeps_the_other_sites(
    settings: Settings, forgettable: Forgettable
) -> None:
    gone, kept = forgettable.gone_site, forgettable.site
    raw = settings.table_uri("raw.pageviews")
    views = ("agg.traffic_1m", "agg.traffic_1d", "agg.sessions", "agg.visits_1d")
    assert all(site_rows(settings.table_uri(v), gone) > 0 for v in views)
    kept_before = {v: site_rows(settings.table_uri(v), kept) for v in views}
    assert all(kept_before.values())

    result = tally("forget", "--site", gone)
    assert result.returncode == 0, result.stderr
    assert "raw.pageviews: 12 rows deleted" in result.stdout
    assert "agg.traffic_1d:" in result.stdout and "agg.sessions:" in result.stdout
    assert site_rows(raw, gone) == 0 and site_rows(raw, kept) >= 5
    assert visitor_free_of_site(Path(raw), gone)  # the files are gone from storage, not only unreferenced
    for view in views:
        assert site_rows(settings.table_uri(view), gone) == 0, view
        assert site_rows(settings.table_uri(view), kept) == kept_before[view], view


def visitor_free_of_site(table_dir: Path, site: str) -> bool:
    """No Parquet file left under the table's folder holds a row of ``site``."""
    return all(
        site not in pq.read_table(f, columns=["site_id"]).column("site_id").to_pylist()
        for f in table_dir.rglob("*.parquet")
    )


def table_committed(uri: str) -> bool:
    """The table's first commit is written (its data files come before it)."""
    return any(Path(uri, "_delta_log").glob("*.json"))


def test_maintenance_compacts_without_changing_the_data_and_status_shows_lag(
    settings: Settings, archiver: None
) -> None:
    uri = settings.table_uri("raw.pageviews")
    wait_for(lambda: table_committed(uri), 60, "the raw table's first commit")
    before = DeltaTable(uri).to_pyarrow_table(columns=["event_id"]).num_rows
    result = tally("maintain")
    assert result.returncode == 0, result.stderr
    assert "raw.pageviews:" in result.stdout and "small files compacted" in result.stdout
    assert DeltaTable(uri).to_pyarrow_table(columns=["event_id"]).num_rows >= before
    status = tally("status").stdout
    assert f"archive lag {settings.kafka.pageviews_topic}:" in status


def test_sql_queries_the_tables_including_time_travel(settings: Settings, archiver: None) -> None:
    produce(settings, "demo.tally.local", f"tt-{uuid.uuid4().hex[:8]}", 3)  # a commit, even if the first test
    wait_for(lambda: table_committed(settings.table_uri("raw.pageviews")), 60, "the raw table's first commit")
    # One command (one Spark JVM) asks both: the table now, and as of its first version.
    query = (
        "SELECT (SELECT COUNT(*) FROM raw.pageviews) AS n, (SELECT COUNT(*) FROM raw.pageviews VERSION AS OF 0) AS v0"
    )
    uri = settings.table_uri("raw.pageviews")

    def counted(table: DeltaTable) -> int:  # by another reader: delta-rs
        return int(table.to_pyarrow_table(columns=["event_id"]).num_rows)

    before = counted(DeltaTable(uri))
    done = tally("sql", query)
    assert done.returncode == 0, done.stderr
    after = counted(DeltaTable(uri))
    rows = [line.replace(" ", "").strip("|").split("|") for line in done.stdout.splitlines() if line.startswith("|")]
    assert rows[0] == ["n", "v0"], done.stdout
    now, first = (int(cell) for cell in rows[1])
    # The archiver only appends meanwhile; version 0 is what it held then, whatever was deleted since.
    assert before <= now <= after, done.stdout
    # Its files may be VACUUMed by the forget tests; the log's statistics still count its rows.
    version_0 = DeltaTable(uri, version=0).get_add_actions(flatten=True).column("num_records").to_pylist()
    assert first == sum(version_0), done.stdout
