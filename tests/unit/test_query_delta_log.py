"""What a Delta commit did to a table's files (query.delta_log), from log entries as delta-rs writes
them, and the fragment of a removed file, read with its partition values."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from query import delta_log


def entry(*actions: dict[str, object]) -> str:
    return "\n".join(json.dumps(a) for a in ({"commitInfo": {"operation": "X"}}, *actions)) + "\n"


def add(path: str, change: bool, day: str | None = "2026-01-01") -> dict[str, object]:
    return {"add": {"path": path, "dataChange": change, "partitionValues": {"event_date": day}}}


def remove(path: str, change: bool) -> dict[str, object]:
    return {"remove": {"path": path, "dataChange": change, "partitionValues": {"event_date": "2026-01-01"}}}


def test_a_compaction_is_a_rewrite_and_anything_else_is_not() -> None:
    compaction = delta_log._commit(entry(remove("a", False), remove("b", False), add("c", False)))
    assert compaction.rewrite and compaction.removed.keys() == {"a", "b"} and compaction.added.keys() == {"c"}
    assert not delta_log._commit(entry(remove("a", True), add("c", True))).rewrite, "a delete rewrote rows"
    assert not delta_log._commit(entry(remove("a", False), add("c", True))).rewrite
    assert not delta_log._commit(entry({"txn": {"appId": "x", "version": 3}}, add("c", True))).rewrite
    assert not delta_log._commit(entry(add("c", False))).rewrite, "nothing removed: not a rewrite of rows"
    empty = delta_log._commit(entry({"metaData": {"id": "x"}}))  # a column added, a vacuum's commit
    assert not empty.rewrite and not empty.added and not empty.removed


def test_log_paths_are_decoded_as_the_dataset_lists_them() -> None:
    found = delta_log._commit(entry(add("event_date=2026-01-01/part%2D1.parquet", True)))
    assert list(found.added) == ["event_date=2026-01-01/part-1.parquet"]


def test_commits_of_a_table_and_none_past_its_last_or_too_many(tmp_path: Path) -> None:
    for a in (1, 2):  # two files of one date, merged by the compaction (version 2)
        rows = pa.table({"a": [a], "event_date": [dt.date(2026, 1, 1)]})
        write_deltalake(str(tmp_path), rows, mode="append", partition_by=["event_date"])
    DeltaTable(str(tmp_path)).optimize.compact()
    raw = DeltaTable(str(tmp_path)).to_pyarrow_dataset()
    found = delta_log.commits(raw, 0, 2)
    assert found is not None and [c.rewrite for c in found] == [False, True]
    assert found[0].added.keys() < found[1].removed.keys() and len(found[1].removed) == 2
    assert set(found[1].added) == set(raw.files), "the compaction's file is the table's only one"
    assert delta_log.commits(raw, 2, 2) == []
    assert delta_log.commits(raw, 2, 3) is None, "no such version yet"
    assert delta_log.commits(raw, 0, delta_log.MAX_COMMITS + 1) is None, "too far behind: read the range"


def test_a_removed_file_is_read_with_its_partition_values(tmp_path: Path) -> None:
    for day in (dt.date(2026, 1, 1), None):
        rows = pa.table({"a": [1, 2], "event_date": pa.array([day, day], pa.date32())})
        write_deltalake(str(tmp_path), rows, mode="append", partition_by=["event_date"])
    raw = DeltaTable(str(tmp_path)).to_pyarrow_dataset()
    for path in raw.files:
        partition = {"event_date": None if "HIVE_DEFAULT" in path else "2026-01-01"}
        assert delta_log.exists(raw, path)
        read = pa.dataset.FileSystemDataset(
            [delta_log.fragment(raw, path, partition)], raw.schema, raw.format, raw.filesystem
        ).to_table()
        day = None if partition["event_date"] is None else dt.date(2026, 1, 1)
        assert read.column("event_date").to_pylist() == [day, day]
    assert not delta_log.exists(raw, "event_date=2026-01-01/gone.parquet")
