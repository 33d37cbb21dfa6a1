"""The daily salt is never empty or short: with an empty key, visitor_id = HMAC(salt, site|IP|UA)
is computable by anyone. Real processes race for each day's first salt, as ingest workers do."""

from __future__ import annotations

import logging
import multiprocessing
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Barrier
from pathlib import Path

import pytest

from ingest.salts import DAY_MS, SaltStore

WORKERS = 6
DAYS = 200
FIRST_DAY = 20_000  # 2024-10-04


def salts_of_each_day(folder: str, barrier: Barrier, results: Connection) -> None:
    """One worker: for each day, wait for every other worker, then ask for the day's salt at once."""
    store = SaltStore(Path(folder))
    found = []
    for day in range(FIRST_DAY, FIRST_DAY + DAYS):
        barrier.wait()
        found.append(store.salt_for(day * DAY_MS + 1).hex())
    results.send(found)


def test_processes_racing_for_the_first_salt_of_a_day_all_get_the_same_32_bytes(tmp_path: Path) -> None:
    # fork: spawn would re-run the parent's __main__, which other tests (Streamlit's AppTest) replace.
    # A pipe per worker, not a Queue: a Queue's put starts a thread in the worker, and a thread
    # started in a process forked from this one (which earlier tests leave with threads running)
    # aborted the worker once in CI.
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(WORKERS, timeout=60)
    pipes = [context.Pipe(duplex=False) for _ in range(WORKERS)]
    workers = [context.Process(target=salts_of_each_day, args=(str(tmp_path), barrier, sender)) for _, sender in pipes]
    for worker in workers:
        worker.start()
    try:
        found = []
        for reader, _ in pipes:
            assert reader.poll(120), "a worker sent no salts within 120 s"
            found.append(reader.recv())
    finally:
        for worker in workers:
            worker.join(timeout=30)
    for day in range(DAYS):
        salts = {worker[day] for worker in found}
        assert len(salts) == 1, f"day {day}: the workers disagree on the salt: {salts}"
        assert len(bytes.fromhex(salts.pop())) == 32, f"day {day}: a salt of other than 32 bytes"


@pytest.mark.parametrize("leftover", ["", "\n", "00" * 16, "not hex at all"])
def test_an_empty_or_short_salt_file_left_by_a_crash_is_replaced_not_used(
    tmp_path: Path, leftover: str, caplog: pytest.LogCaptureFixture
) -> None:
    monday = FIRST_DAY * DAY_MS
    (tmp_path / "2024-10-04.salt").write_text(leftover)
    with caplog.at_level(logging.ERROR, logger="tally.ingest.salts"):
        salt = SaltStore(tmp_path).salt_for(monday + 1)
    assert len(salt) == 32
    assert bytes.fromhex((tmp_path / "2024-10-04.salt").read_text()) == salt  # replaced on disk, for every worker
    assert SaltStore(tmp_path).salt_for(monday + 2) == salt
    assert "unusable salt file replaced" in caplog.text


def test_a_good_salt_file_is_used_as_it_is_and_no_temporary_file_is_left(tmp_path: Path) -> None:
    monday = FIRST_DAY * DAY_MS
    (tmp_path / "2024-10-04.salt").write_text("ab" * 32 + "\n")
    assert SaltStore(tmp_path).salt_for(monday) == bytes.fromhex("ab" * 32)
    tuesday = SaltStore(tmp_path).salt_for(monday + DAY_MS)
    assert len(tuesday) == 32
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock", "2024-10-05.salt"]
