"""A prepared scan of a newer version of raw.pageviews, built from the scan of the version before
and the files added since (query.scans, query.scan_cache): its tables and every answer over it are
those of a read of the new version, row for row and type for type, over a real Delta table written
in appends (delta-rs) as the archiver writes it, compactions followed through the table's log; a
version that removed rows (a forgotten visitor) or changed a column's type is read again."""

from __future__ import annotations

import datetime as dt
import gc
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from query import scan_cache, scans
from query.aggregates import Range
from query.exact import ExactQuery
from query.raw_events import Interval
from query.scan_cache import VERSIONS_KEPT, prepared_scan
from query.scans import PreparedScan
from tally.storage import arrow_dataset
from tests.unit.test_query_exact import COLUMNS, GAP_MS, SITE, START, TODAY, make_events
from tests.unit.test_query_prepared_scan import BODIES, query, rows

DAYS = Range(START, TODAY)
SCHEMA = pa.schema(COLUMNS)
# A range inside the dates (the Stats API's date-times): events outside it are in no table.
INSIDE = (
    dt.datetime.combine(START + dt.timedelta(days=2), dt.time(6), dt.UTC),
    dt.datetime.combine(TODAY - dt.timedelta(days=3), dt.time(18, 30), dt.UTC),
)


pytestmark = pytest.mark.usefixtures("prepared_scans")  # each test its own cache (tests/unit/conftest.py)


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
    """The table's newest version as the dashboard opens it (its files read by DuckDB itself)."""
    found = DeltaTable(str(table))
    return arrow_dataset(found), (str(table), found.version())


def tables(scan: PreparedScan) -> dict[str, Any]:
    """Each table's rows in one order, and its columns' names and types."""
    found: dict[str, Any] = {}
    with scan.cursor() as con:
        for table, order in (("numbered", "event_id"), ("visits", "visitor_id, visit")):
            rows = con.execute(f"SELECT * FROM {table} ORDER BY {order}")
            found[table] = ([(d[0], str(d[1])) for d in rows.description or []], rows.fetchall())
    return found


def nameless(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Two of the events with no visitor id: a read takes all such events as one visitor's."""
    return [{**e, "visitor_id": None, "event_id": f"{e['event_id']}-nameless"} for e in events[:2]]


@pytest.mark.parametrize(
    ("copy_past", "layered"),
    [(0, [True, True, True]), (10**9, [False, False, False]), (1, [True, True, False])],
    ids=["layers", "copies", "layers-then-a-copy"],
)
@pytest.mark.parametrize("interval", [None, INSIDE], ids=["dates", "date-times"])
def test_each_version_s_scan_is_a_read_of_that_version_though_only_added_files_were_read(
    tmp_path: Path,
    scan_reads: list[PreparedScan],
    copy_past: int,
    layered: list[bool],
    interval: Interval,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 0: a layer over the read at every version; 1: a copy once the touched visitors' events are
    # more than the read's (the fourth commit)
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
        shuffled[:cut] + early + nameless(shuffled[:cut]),  # a visitor's events come in any order
        [*shuffled[cut : cut + 40], joining, *nameless(shuffled[cut:])],  # joins two visits into one
        elsewhere,  # nothing in the range: the scan is the same
        shuffled[cut + 40 :],
    ]
    table = tmp_path / "raw.pageviews"
    built: list[PreparedScan] = []
    read_whole: list[int] = []
    for commit in commits:
        append(table, commit)
        raw, version = snapshot(table)
        before = len(scan_reads)
        scan = prepared_scan(raw, version, SITE, DAYS, interval, GAP_MS)
        read_whole.append(len(scan_reads) - before)
        assert tables(scan) == tables(PreparedScan.read(raw, SITE, DAYS, interval, GAP_MS))
        for body in (
            BODIES if interval is None else [{**b, "date_range": [t.isoformat() for t in INSIDE]} for b in BODIES]
        ):
            asked = query(body)
            shared = ExactQuery(raw, SITE, GAP_MS, snapshot=version).answer(asked)
            assert rows(shared) == rows(ExactQuery(raw, SITE, GAP_MS).answer(asked)), body
        built.append(scan)
    assert read_whole == [1, 0, 0, 0], "only the first version is read whole"
    assert [s.read_scan is built[0] for s in built[1:]] == layered
    assert built[2] is built[1], "a commit with none of the range's events keeps the scan"
    assert len({id(s) for s in built}) == 3
    with built[1].cursor() as con:
        joined = con.execute("SELECT pageviews FROM visits WHERE visitor_id = 'late'").fetchall()
    assert joined == [(3,)], "the late event joined the two visits"


def test_compactions_are_followed_without_reading_the_range_again(
    tmp_path: Path, scan_reads: list[PreparedScan]
) -> None:
    """The archiver's compaction merges files the scan read with files added since that it did not
    read yet; the rows added since are read from those, removed but still on disk."""
    events = make_events()
    table = tmp_path / "raw.pageviews"

    def compact() -> None:
        DeltaTable(str(table)).optimize.compact()

    def asked() -> PreparedScan:
        raw, version = snapshot(table)
        reads = len(scan_reads)
        scan = prepared_scan(raw, version, SITE, DAYS, None, GAP_MS)
        assert len(scan_reads) == reads, "the compactions removed files but kept their rows: not read again"
        assert tables(scan) == tables(PreparedScan.read(raw, SITE, DAYS, None, GAP_MS))
        return scan

    append(table, events[:200])
    raw, version = snapshot(table)
    prepared_scan(raw, version, SITE, DAYS, None, GAP_MS)
    append(table, events[200:300])  # not asked about: the compaction merges it with what the scan read
    compact()
    append(table, events[300:400])
    scan = asked()
    compact()  # nothing added: the same scan, now holding the compaction's files
    assert asked() is scan
    append(table, events[400:450])
    compact()  # the files of the compaction before, compacted again with rows added since
    append(table, events[450:500])
    compact()
    append(table, events[500:])
    asked()


def test_a_version_that_removed_rows_is_read_again(tmp_path: Path, scan_reads: list[PreparedScan]) -> None:
    events = make_events()
    table = tmp_path / "raw.pageviews"
    append(table, events[:300])
    raw, version = snapshot(table)
    prepared_scan(raw, version, SITE, DAYS, None, GAP_MS)
    append(table, events[300:])
    forgotten = events[0]["visitor_id"]
    DeltaTable(str(table)).delete(f"visitor_id = '{forgotten}'")  # `tally forget --visitor`
    raw, version = snapshot(table)
    scan = prepared_scan(raw, version, SITE, DAYS, None, GAP_MS)
    assert len(scan_reads) == 2, "a visitor's rows were deleted: the range is read again"
    assert tables(scan) == tables(PreparedScan.read(raw, SITE, DAYS, None, GAP_MS))
    with scan.cursor() as con:
        assert con.execute(f"SELECT count(*) FROM evr WHERE visitor_id = '{forgotten}'").fetchone() == (0,)


def test_a_compaction_whose_removed_files_were_vacuumed_is_read_again(
    tmp_path: Path, scan_reads: list[PreparedScan]
) -> None:
    events = make_events()
    table = tmp_path / "raw.pageviews"
    append(table, events[:300])
    raw, version = snapshot(table)
    prepared_scan(raw, version, SITE, DAYS, None, GAP_MS)
    append(table, events[300:])  # rows the scan has yet to read, only in removed files after the compaction
    DeltaTable(str(table)).optimize.compact()
    DeltaTable(str(table)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    raw, version = snapshot(table)
    scan = prepared_scan(raw, version, SITE, DAYS, None, GAP_MS)
    assert len(scan_reads) == 2, "the rows added since are in no file left: the range is read again"
    assert tables(scan) == tables(PreparedScan.read(raw, SITE, DAYS, None, GAP_MS))


def test_a_version_whose_columns_changed_type_is_read_again(tmp_path: Path, scan_reads: list[PreparedScan]) -> None:
    """The archiver adds a column (a vital) in a commit of its own: read as NULL::VARCHAR before, it
    now has its type, so a scan extended from the old one would keep the wrong type."""
    events = make_events()
    table = tmp_path / "raw.pageviews"
    append(table, events[:300])
    raw, version = snapshot(table)
    prepared_scan(raw, version, SITE, DAYS, None, GAP_MS)
    rest = events[300:]
    columns = {name: [e.get(name) for e in rest] for name in COLUMNS}
    columns["props"] = [list((e.get("props") or {}).items()) for e in rest]
    columns["scroll_depth"] = [40] * len(rest)
    later = pa.table(columns, schema=pa.schema([*SCHEMA, pa.field("scroll_depth", pa.int32())]))
    write_deltalake(str(table), later, mode="append", partition_by=["event_date"], schema_mode="merge")
    raw, version = snapshot(table)
    scan = prepared_scan(raw, version, SITE, DAYS, None, GAP_MS)
    assert len(scan_reads) == 2, "a column's type changed: the range is read again"
    assert tables(scan) == tables(PreparedScan.read(raw, SITE, DAYS, None, GAP_MS))


def test_a_layer_answers_after_the_read_scan_it_lies_over_left_the_kept_versions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scans, "COPY_PAST", 0)  # a layer at every version
    events = make_events()
    table = tmp_path / "raw.pageviews"
    for part in (events[:300], events[300:400], events[400:]):
        append(table, part)
        raw, version = snapshot(table)
        prepared_scan(raw, version, SITE, DAYS, None, GAP_MS)
    assert list(scan_cache.SCANS.kept().values()) == [[1, 2]], "the read (version 0) left the kept versions"
    gc.collect()
    scan = prepared_scan(raw, version, SITE, DAYS, None, GAP_MS)
    assert scan.read_scan is not None
    assert tables(scan) == tables(PreparedScan.read(raw, SITE, DAYS, None, GAP_MS))


def test_a_range_keeps_its_two_newest_versions_and_the_oldest_scan_is_freed(tmp_path: Path) -> None:
    events = make_events()
    table = tmp_path / "raw.pageviews"
    found: list[PreparedScan] = []
    for part in (events[:100], events[100:200], events[200:]):
        append(table, part)
        raw, version = snapshot(table)
        found.append(prepared_scan(raw, version, SITE, DAYS, None, GAP_MS))
    first = found[0]
    assert first.read_scan is None and all(s.read_scan is not first for s in found[1:]), "version 2 was a copy"
    with first.cursor() as con:
        con.execute("SELECT count(*) FROM evr").fetchone()
    database, con = first.database, first.con
    found.clear()
    del first
    gc.collect()
    attached = {r[0] for r in con.execute("SELECT database_name FROM duckdb_databases()").fetchall()}
    assert database not in attached, "the oldest version's database is detached once nothing holds it"
    assert [len(v) for v in scan_cache.SCANS.kept().values()] == [VERSIONS_KEPT]


def test_a_version_is_built_once_though_asked_for_while_the_version_before_was_being_built() -> None:
    """Builds of a range wait for each other whatever their version: a question asking for a version
    whose build has just started waits for it instead of building it a second time."""
    cache = scan_cache.PreparedScans()
    key = scan_cache.ScanKey("raw.pageviews", SITE, START, TODAY, None, GAP_MS)
    gates = {1: threading.Event(), 2: threading.Event()}
    started = {1: threading.Event(), 2: threading.Event()}
    built: list[int] = []

    def builder(version: int) -> Any:
        def build(base: PreparedScan | None) -> Any:
            built.append(version)
            started[version].set()
            assert gates[version].wait(10)
            return object()

        return build

    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(cache.get, key, 1, builder(1))
        assert started[1].wait(10)
        second = pool.submit(cache.get, key, 2, builder(2))  # waits for version 1's build
        gates[1].set()
        assert started[2].wait(10)
        third = pool.submit(cache.get, key, 2, builder(2))  # asks while version 2 is being built
        gates[2].set()
        assert second.result(10) is third.result(10)
        first.result(10)
    assert built == [1, 2]
