"""ArchiveTable on a real (local) Delta table: appends with their offsets, across reopenings."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

import archiver.tables
from archiver.tables import ArchiveTable, TableBatch

SCHEMA = pa.schema([("day", pa.date32()), ("event_id", pa.string())])


def _batch(first_offset: int, rows: int) -> TableBatch:
    batch = TableBatch()
    for offset in range(first_offset, first_offset + rows):
        batch.add({"day": dt.date(2026, 1, 1), "event_id": f"e{offset}"}, "pageviews", 0, offset)
    return batch


def test_the_table_is_reopened_every_so_many_commits_and_keeps_every_row_and_offset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A DeltaTable that commits through itself grows with every commit; the archiver reopens it.
    monkeypatch.setattr(archiver.tables, "REOPEN_EVERY_COMMITS", 3)
    table = ArchiveTable(str(tmp_path / "t"), SCHEMA, "day")
    opened = []
    for commit in range(7):
        table.append(_batch(commit * 2, 2))
        opened.append(table._table)  # kept alive, so each object's id stays its own
    # Opened at the first commit, then again after every third: commits 1-3, 4-6 and 7 share one each.
    ids = [id(t) for t in opened]
    assert ids[0] == ids[1] == ids[2] != ids[3] == ids[4] == ids[5] != ids[6]
    assert len(set(ids)) == 3

    reread = DeltaTable(str(tmp_path / "t"))
    assert reread.version() == 6
    assert sorted(reread.to_pyarrow_table()["event_id"].to_pylist()) == sorted(f"e{n}" for n in range(14))
    # The Kafka offsets ride in the commits: a new archiver resumes after the last one.
    assert ArchiveTable(str(tmp_path / "t"), SCHEMA, "day").next_offset("pageviews", 0) == 14
    assert table.next_offset("pageviews", 0) == 14
