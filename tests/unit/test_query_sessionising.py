"""Sessionising raw events in DuckDB (``query.raw_events.visits_sql``): the views' rule, row for
row, including events whose keys (visitor, time, id) are equal, which the marks written back by row
id must neither drop nor number twice; and the directories DuckDB spills into."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import duckdb
import pytest

from query import raw_events
from query.raw_events import COLUMNS, VISIT_ATTRIBUTES, visits_sql

GAP_MS = 30 * 60 * 1000
NAMES = COLUMNS.split(", ")


def events_table(con: duckdb.DuckDBPyConnection, events: list[dict[str, Any]]) -> None:
    """A table ``src`` of the columns questions read, every one not given NULL."""
    types = {"event_time": "BIGINT", "engagement_ms": "BIGINT", "load_ms": "BIGINT"}
    con.execute("CREATE TABLE src (" + ", ".join(f"{c} {types.get(c, 'VARCHAR')}" for c in NAMES) + ")")
    for e in events:
        con.execute(f"INSERT INTO src VALUES ({', '.join('?' for _ in NAMES)})", [e.get(c) for c in NAMES])


def event(visitor: str, minute: float, event_id: str, path: str = "/", **other: Any) -> dict[str, Any]:
    return {
        "visitor_id": visitor,
        "event_time": int(minute * 60_000),
        "event_id": event_id,
        "type": "pageview",
        "path": path,
        **other,
    }


def sessionised(con: duckdb.DuckDBPyConnection, database: str | None) -> str:
    """``src`` sessionised into ``database`` (attached here; None: temporary tables); the tables' prefix."""
    if database:
        con.execute(f"ATTACH ':memory:' AS {database}")
    con.execute(visits_sql("src", GAP_MS, database))
    return f"{database}.main." if database else ""


@pytest.mark.parametrize("database", [None, "scan_t"])
def test_visits_follow_the_gap_and_take_their_first_event_s_attributes(database: str | None) -> None:
    con = duckdb.connect()
    events_table(
        con,
        [
            event("a", 0, "e2", "/second", country="FR"),
            event("a", 0, "e1", "/first", country="DE"),  # same time: the lower id comes first
            event("a", 29.99, "e3", "/third"),
            event("a", 59.99, "e4", "/later"),  # exactly the gap after e3: a new visit
            event("b", 5, "e5", "/b", referrer="r.example"),
            {**event("b", 6, "e6"), "type": "engagement", "engagement_ms": 500},
        ],
    )
    prefix = sessionised(con, database)
    numbered = con.execute(f"SELECT event_id, starts, visit FROM {prefix}numbered ORDER BY event_id").fetchall()
    assert numbered == [("e1", 1, 1), ("e2", 0, 1), ("e3", 0, 1), ("e4", 1, 2), ("e5", 1, 1), ("e6", 0, 1)]
    visits = con.execute(
        f"SELECT visitor_id, visit, pageviews, entry_page, exit_page, duration_ms, country, referrer "
        f"FROM {prefix}visits ORDER BY visitor_id, visit"
    ).fetchall()
    assert visits == [
        ("a", 1, 3, "/first", "/third", int(29.99 * 60_000), "DE", None),
        ("a", 2, 1, "/later", "/later", 0, None, None),
        ("b", 1, 1, "/b", "/b", 60_000, None, "r.example"),
    ]
    # The working tables are gone; every column of the source is kept, once.
    tables = {r[0] for r in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert tables == {"src", "numbered", "visits"}
    columns = {r[0]: r[1] for r in con.execute(f"DESCRIBE {prefix}numbered").fetchall()}
    assert list(columns) == [*NAMES, "starts", "visit"]
    # Questions join events to visits on (visitor, visit): a BIGINT, not the HUGEINT of a sum.
    assert (columns["starts"], columns["visit"]) == ("INTEGER", "BIGINT")
    assert con.execute(f"SELECT typeof(visit) FROM {prefix}visits LIMIT 1").fetchone() == ("BIGINT",)
    assert set(VISIT_ATTRIBUTES) <= set(columns)


def test_events_with_equal_keys_are_each_kept_and_start_one_visit_between_them() -> None:
    """Two rows with the same visitor, time and id (a replayed beacon a table kept twice): both rows
    stay, numbered in the same visit, and only one of them starts it."""
    con = duckdb.connect()
    twice = event("a", 10, "dup", "/x")
    events_table(con, [twice, twice, {**twice, "path": "/y"}, event("a", 100, "later", "/z")])
    con.execute(visits_sql("src", GAP_MS))
    assert con.execute("SELECT count(*), sum(starts), count(DISTINCT visit) FROM numbered").fetchone() == (4, 2, 2)
    assert con.execute(
        "SELECT visit, count(*), sum(starts) FROM numbered GROUP BY visit ORDER BY visit"
    ).fetchall() == [
        (1, 3, 1),
        (2, 1, 1),
    ]
    assert con.execute("SELECT visit, pageviews FROM visits ORDER BY visit").fetchall() == [(1, 3), (2, 1)]


@pytest.mark.parametrize("database", [None, "scan_t"])
def test_events_without_a_visitor_are_numbered_as_one_visitor_s_but_make_no_visit(database: str | None) -> None:
    """Questions join events to visits on the visitor, which never matches a NULL: a visits row of
    theirs would be counted by the questions reading visits alone and by none of the others."""
    con = duckdb.connect()
    events_table(
        con,
        [
            {**event("a", 0, "e1", "/a"), "visitor_id": None},
            {**event("b", 1, "e2", "/b"), "visitor_id": None},
            {**event("c", 100, "e3", "/c"), "visitor_id": None},  # after the gap: a second visit
            event("d", 0, "e4", "/d", country="DE"),
        ],
    )
    prefix = sessionised(con, database)
    numbered = con.execute(f"SELECT event_id, starts, visit FROM {prefix}numbered ORDER BY event_id").fetchall()
    assert numbered == [("e1", 1, 1), ("e2", 0, 1), ("e3", 1, 2), ("e4", 1, 1)]
    visits = con.execute(f"SELECT visitor_id, visit, pageviews, entry_page, country FROM {prefix}visits").fetchall()
    assert visits == [("d", 1, 1, "/d", "DE")]


def test_spill_directories_of_processes_no_longer_running_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    dirs = {
        "ended": tmp_path / f"{raw_events.SPILL_PREFIX}{ended.pid}",
        "running": tmp_path / f"{raw_events.SPILL_PREFIX}{os.getppid()}",
        "own": tmp_path / f"{raw_events.SPILL_PREFIX}{os.getpid()}",
        "other": tmp_path / f"{raw_events.SPILL_PREFIX}notapid",
    }
    for d in dirs.values():
        d.mkdir()
        (d / "duckdb_temp_storage_DEFAULT-0.tmp").write_bytes(b"x")
    raw_events.sweep_spills.__wrapped__()
    assert {name for name, d in dirs.items() if d.exists()} == {"running", "own", "other"}
    assert raw_events.spill_dir() == dirs["own"]
