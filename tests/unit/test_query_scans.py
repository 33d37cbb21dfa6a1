"""A prepared scan of a newer version of raw.pageviews, built from the scan of the version before
and the files added since (query.scans): its tables and every answer over it are those of a read of
the new version, row for row, over a real Delta table written in appends (delta-rs) as the archiver
writes it; a version that removed files (a compaction) is read again."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from query import scans
from query.aggregates import Range
from query.exact import ExactQuery
from query.scans import PreparedScan, PreparedScans, prepared_scan
from tests.unit.test_query_exact import COLUMNS, GAP_MS, SITE, START, TODAY, make_events
from tests.unit.test_query_prepared_scan import BODIES, query, rows

DAYS = Range(START, TODAY)
SCHEMA = pa.schema(COLUMNS)


@pytest.fixture(autouse=True)
def fresh_scans(monkeypatch: pytest.MonkeyPatch) -> PreparedScans:
    kept = PreparedScans()
    monkeypatch.setattr(scans, "SCANS", kept)
    return kept


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each whole read of a range (not an extension)."""
    done: list[int] = []
    original = PreparedScan.read.__func__  # type: ignore[attr-defined]

    def counting(cls: type[PreparedScan], *args: Any, **kw: Any) -> PreparedScan:
        done.append(1)
        return original(cls, *args, **kw)  # type: ignore[no-any-return]

    monkeypatch.setattr(PreparedScan, "read", classmethod(counting))
    return done


def at(day: dt.date, minutes: int) -> int:
    return int((dt.datetime.combine(day, dt.time(), dt.UTC) + dt.timedelta(minutes=minutes)).timestamp() * 1000)


def late_visitor() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Two visits 40 minutes apart, and the event that arrives late between them and joins them."""
    day = START + dt.timedelta(days=3)
    base = {"site_id": SITE, "visitor_id": "late", "type": "pageview", "event_date": day, "is_bot": False}
    early = [
        {**base, "event_id": "late-1", "path": "/", "event_time": at(day, 600), "country": "DE"},
        {**base, "event_id": "late-3", "path": "/pricing", "event_time": at(day, 640), "country": "DE"},
    ]
    return early, {**base, "event_id": "late-2", "path": "/blog/a", "event_time": at(day, 620), "country": "DE"}


def append(table: Path, events: list[dict[str, Any]]) -> None:
    columns = {name: [e.get(name) for e in events] for name in COLUMNS}
    columns["props"] = [list((e.get("props") or {}).items()) for e in events]
    write_deltalake(str(table), pa.table(columns, schema=SCHEMA), mode="append", partition_by=["event_date"])


def snapshot(table: Path) -> tuple[Any, tuple[str, int]]:
    found = DeltaTable(str(table))
    return found.to_pyarrow_dataset(), (str(table), found.version())


def tables(scan: PreparedScan) -> dict[str, list[dict[str, Any]]]:
    with scan.cursor() as con:
        return {
            "numbered": con.execute("SELECT * EXCLUDE (props), props::VARCHAR FROM numbered ORDER BY event_id")
            .fetch_arrow_table()
            .to_pylist(),
            "visits": con.execute("SELECT * FROM visits ORDER BY visitor_id, visit").fetch_arrow_table().to_pylist(),
        }


@pytest.mark.parametrize(
    ("copy_past", "layered"),
    [(0, [True, True, True]), (10**9, [False, False, False]), (2, [True, True, False])],
    ids=["layers", "copies", "layers-then-a-copy"],
)
def test_each_version_s_scan_is_a_read_of_that_version_though_only_added_files_were_read(
    tmp_path: Path, reads: list[int], copy_past: int, layered: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    # 0: a layer over the read at every version; 2: a copy once the events added since the read
    # are more than half of it (the fourth commit)
    monkeypatch.setattr(scans, "COPY_PAST", copy_past)
    events = make_events()
    early, joining = late_visitor()
    shuffled = random.Random(3).sample(events, len(events))
    cut = len(shuffled) * 3 // 5
    elsewhere = [
        {**events[0], "event_id": "other-site", "site_id": "other.example"},
        {**events[0], "event_id": "out-of-range", "event_date": TODAY + dt.timedelta(days=1)},
    ]
    commits = [
        shuffled[:cut] + early,  # a visitor's events arrive in any order: the next commits fill gaps
        [*shuffled[cut : cut + 40], joining],  # joins two visits into one
        elsewhere,  # nothing in the range: the scan is the same
        shuffled[cut + 40 :],
    ]
    table = tmp_path / "raw.pageviews"
    built: list[PreparedScan] = []
    read_whole: list[int] = []
    for commit in commits:
        append(table, commit)
        raw, version = snapshot(table)
        before = len(reads)
        scan = prepared_scan(raw, version, SITE, DAYS, None, GAP_MS)
        read_whole.append(len(reads) - before)
        assert tables(scan) == tables(PreparedScan.read(raw, SITE, DAYS, None, GAP_MS))
        for body in BODIES:
            asked = query(body)
            shared = ExactQuery(raw, SITE, GAP_MS, snapshot=version).answer(asked)
            assert rows(shared) == rows(ExactQuery(raw, SITE, GAP_MS).answer(asked)), body
        built.append(scan)
    assert read_whole == [1, 0, 0, 0], "only the first version is read whole"
    assert [s.read_scan is built[0] for s in built[1:]] == layered
    assert built[2] is built[1], "a commit with none of the range's events keeps the scan"
    assert len({id(s) for s in built}) == 3
    joined = [v for v in tables(built[1])["visits"] if v["visitor_id"] == "late"]
    assert [v["pageviews"] for v in joined] == [3], "the late event joined the two visits"


def test_a_version_that_removed_files_is_read_again(tmp_path: Path, reads: list[int]) -> None:
    events = make_events()
    table = tmp_path / "raw.pageviews"
    append(table, events[:200])
    raw, version = snapshot(table)
    prepared_scan(raw, version, SITE, DAYS, None, GAP_MS)
    append(table, events[200:])
    raw, version = snapshot(table)
    prepared_scan(raw, version, SITE, DAYS, None, GAP_MS)
    assert len(reads) == 1, "the second version only added files"
    DeltaTable(str(table)).optimize.compact()
    raw, version = snapshot(table)
    compacted = prepared_scan(raw, version, SITE, DAYS, None, GAP_MS)
    assert len(reads) == 2, "the compaction removed files: the range is read again"
    assert tables(compacted) == tables(PreparedScan.read(raw, SITE, DAYS, None, GAP_MS))


def test_a_range_keeps_its_two_newest_versions_and_the_oldest_scan_is_freed(tmp_path: Path) -> None:
    events = make_events()
    table = tmp_path / "raw.pageviews"
    found: list[PreparedScan] = []
    for part in (events[:100], events[100:200], events[200:]):
        append(table, part)
        raw, version = snapshot(table)
        found.append(prepared_scan(raw, version, SITE, DAYS, None, GAP_MS))
    first = found[0]
    with first.cursor() as con:
        con.execute("SELECT count(*) FROM evr").fetchone()
    database, con = first.database, first.con
    found.clear()
    del first
    attached = {r[0] for r in con.execute("SELECT database_name FROM duckdb_databases()").fetchall()}
    assert database not in attached, "the oldest version's database is detached once nothing holds it"
    assert len(scans.SCANS._ranges[next(iter(scans.SCANS._ranges))]) == scans.VERSIONS_KEPT
