"""ArchiveTable on a real (local) Delta table: appends with their offsets, across reopenings and compactions."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import Transaction

import archiver.tables
from archiver.maintenance import compact_older_partitions
from archiver.tables import (
    ArchiveTable,
    DeltaWrites,
    TableBatch,
    archiver_compacts_from,
    maintenance_compacts_before,
)
from tally.tables import archiver_app_id

SCHEMA = pa.schema([("day", pa.date32()), ("event_id", pa.string())])
TODAY = dt.date(2026, 3, 10)


def _batch(first_offset: int, rows: int, day: dt.date = TODAY, kafka_partition: int = 0) -> TableBatch:
    batch = TableBatch()
    for offset in range(first_offset, first_offset + rows):
        batch.add({"day": day, "event_id": f"e{offset}"}, "pageviews", kafka_partition, offset)
    return batch


def _files_by_day(uri: str) -> Counter[dt.date]:
    actions = pa.table(DeltaTable(uri).get_add_actions(flatten=True))
    return Counter(actions.column("partition.day").to_pylist())


def _event_ids(uri: str) -> list[str]:
    return sorted(DeltaTable(uri).to_pyarrow_table(columns=["event_id"])["event_id"].to_pylist())


def test_the_table_is_reopened_every_so_many_commits_and_keeps_every_row_and_offset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A DeltaTable that commits through itself grows with every commit; the archiver reopens it.
    monkeypatch.setattr(archiver.tables, "REOPEN_EVERY_COMMITS", 3)
    # Rows of a day long past: nothing to compact, this test is about reopening alone.
    table = ArchiveTable(str(tmp_path / "t"), SCHEMA, "day", today=lambda: TODAY + dt.timedelta(days=100))
    opened = []
    for commit in range(7):
        table.append(_batch(commit * 2, 2))
        opened.append(table.delta_table)  # kept alive, so each object's id stays its own
    # Opened at the first commit, then again after every third: commits 1-3, 4-6 and 7 share one each.
    ids = [id(t) for t in opened]
    assert ids[0] == ids[1] == ids[2] != ids[3] == ids[4] == ids[5] != ids[6]
    assert len(set(ids)) == 3

    reread = DeltaTable(str(tmp_path / "t"))
    assert reread.version() == 6
    assert _event_ids(str(tmp_path / "t")) == sorted(f"e{n}" for n in range(14))
    # The Kafka offsets ride in the commits: a new archiver resumes after the last one.
    assert ArchiveTable(str(tmp_path / "t"), SCHEMA, "day").next_offset("pageviews", 0) == 14
    assert table.next_offset("pageviews", 0) == 14


def test_the_partitions_written_are_compacted_at_each_reopening_and_keep_every_row_and_offset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # delta-rs holds every live file in memory: the archiver keeps the number of small files bounded.
    monkeypatch.setattr(archiver.tables, "REOPEN_EVERY_COMMITS", 4)
    uri = str(tmp_path / "t")
    table = ArchiveTable(uri, SCHEMA, "day", today=lambda: TODAY)
    yesterday = TODAY - dt.timedelta(days=1)
    next_offset, expected, most_files = {0: 0, 1: 0}, [], 0
    for commit in range(21):
        # Two Kafka partitions, and now and then a late event of yesterday beside today's.
        batch, partition = TableBatch(), commit % 2
        for n in range(3):
            offset, event_id = next_offset[partition], f"p{partition}-{next_offset[partition]}"
            day = yesterday if commit % 5 == 0 and n == 0 else TODAY
            batch.add({"day": day, "event_id": event_id}, "pageviews", partition, offset)
            next_offset[partition] += 1
            expected.append(event_id)
        table.append(batch)
        most_files = max(most_files, sum(_files_by_day(uri).values()))

    # At most the two compacted files plus those of the 4 commits (5 files) before a compaction.
    assert most_files <= 7
    # The 21st commit is the 5th compaction's: one file per day is left.
    assert _files_by_day(uri) == Counter({TODAY: 1, yesterday: 1})
    assert [c["operation"] for c in DeltaTable(uri).history()].count("OPTIMIZE") == 5
    assert _event_ids(uri) == sorted(expected)  # nothing lost, nothing doubled
    # The offsets (txn actions) survive the compactions: a restarted archiver resumes exactly.
    reread = DeltaTable(uri)
    for partition, offset in next_offset.items():
        assert reread.transaction_version(archiver_app_id("pageviews", partition)) == offset
        assert ArchiveTable(uri, SCHEMA, "day").next_offset("pageviews", partition) == offset


def test_partitions_past_the_archivers_days_are_left_to_maintenance(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(archiver.tables, "REOPEN_EVERY_COMMITS", 3)
    uri = str(tmp_path / "t")
    old = archiver_compacts_from(TODAY) - dt.timedelta(days=1)
    table = ArchiveTable(uri, SCHEMA, "day", today=lambda: TODAY)
    for commit in range(7):
        table.append(_batch(commit * 2, 1))
        table.append(_batch(commit * 2 + 1, 1, day=old))
    assert _files_by_day(uri) == Counter({TODAY: 1, old: 7})


def test_maintenance_and_the_archiver_never_compact_the_same_partition(tmp_path: Path) -> None:
    # Two compactions removing the same files both commit with delta-rs 1.6 (their rows doubled),
    # so `tally maintain` keeps a day away from what the archiver compacts, even a day later.
    for today in (TODAY, dt.date(2027, 1, 1), dt.date(2028, 2, 29)):
        assert maintenance_compacts_before(today + dt.timedelta(days=1)) <= archiver_compacts_from(today)

    uri = str(tmp_path / "t")
    table = ArchiveTable(uri, SCHEMA, "day", today=lambda: TODAY)
    recent, old = archiver_compacts_from(TODAY), maintenance_compacts_before(TODAY) - dt.timedelta(days=1)
    for commit, day in enumerate([recent, recent, old, old, TODAY]):
        table.append(_batch(commit, 1, day=day))
    metrics = compact_older_partitions(DeltaTable(uri), "day", TODAY)
    assert metrics["numFilesRemoved"] == 2
    assert _files_by_day(uri) == Counter({recent: 2, old: 1, TODAY: 1})
    assert _event_ids(uri) == [f"e{n}" for n in range(5)]


def _delete_expired(uri: str) -> None:
    """What `tally maintain --retention-days` commits: the rows of days past retention deleted."""
    DeltaTable(uri).delete(f"day < '{(TODAY - dt.timedelta(days=365)).isoformat()}'")


def test_an_append_after_maintenance_deleted_expired_rows_commits_once(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    table = ArchiveTable(uri, SCHEMA, "day", today=lambda: TODAY)
    table.append(_batch(0, 2, day=TODAY - dt.timedelta(days=400)))
    table.append(_batch(2, 2))
    _delete_expired(uri)  # delta-rs takes this for a conflict with the next append through the old table
    table.append(_batch(4, 2))
    assert _event_ids(uri) == ["e2", "e3", "e4", "e5"]
    assert DeltaTable(uri).transaction_version(archiver_app_id("pageviews", 0)) == 6


class _LandsThenFails(DeltaWrites):
    """Delta writes whose next commit lands but reports a failure, as a lost reply would."""

    fail_next = False

    def append(
        self,
        target: DeltaTable | str,
        data: pa.Table,
        *,
        partition_by: str,
        txns: list[Transaction],
        options: dict[str, str] | None,
    ) -> None:
        super().append(target, data, partition_by=partition_by, txns=txns, options=options)
        if self.fail_next:
            self.fail_next = False
            raise CommitFailedError("the reply to a commit that landed was lost")


def test_an_append_is_not_written_again_when_its_failed_commit_had_landed(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    writes = _LandsThenFails()
    table = ArchiveTable(uri, SCHEMA, "day", today=lambda: TODAY, writes=writes)
    table.append(_batch(0, 2))
    writes.fail_next = True
    table.append(_batch(2, 2))
    assert _event_ids(uri) == ["e0", "e1", "e2", "e3"]
    assert table.next_offset("pageviews", 0) == 4


class _RacedByMaintenance(DeltaWrites):
    """Delta writes whose first compaction races a retention delete of `tally maintain`."""

    def __init__(self, uri: str) -> None:
        self.uri, self.raced = uri, False

    def compact(self, table: DeltaTable, *, partition_by: str, days: list[dt.date]) -> dict[str, Any]:
        if not self.raced:
            self.raced = True
            _delete_expired(self.uri)
        return super().compact(table, partition_by=partition_by, days=days)


def test_a_compaction_that_loses_to_a_concurrent_commit_is_done_at_the_next_reopening(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(archiver.tables, "REOPEN_EVERY_COMMITS", 3)
    uri = str(tmp_path / "t")
    table = ArchiveTable(uri, SCHEMA, "day", today=lambda: TODAY, writes=_RacedByMaintenance(uri))
    table.append(_batch(0, 1, day=TODAY - dt.timedelta(days=400)))
    for offset in range(1, 4):
        table.append(_batch(offset, 1))
    # The compaction conflicted ("a concurrent transaction deleted data this operation read"):
    # the archiver goes on, its files still there.
    assert [r.getMessage() for r in caplog.records] == ["compaction postponed"]
    assert _files_by_day(uri) == Counter({TODAY: 3})
    for offset in range(4, 7):
        table.append(_batch(offset, 1))
    assert _files_by_day(uri) == Counter({TODAY: 1})
    assert _event_ids(uri) == [f"e{n}" for n in range(1, 7)]
    assert DeltaTable(uri).transaction_version(archiver_app_id("pageviews", 0)) == 7
