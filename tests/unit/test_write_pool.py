"""Writes a few at a time (``jobs.write_pool.write_each``), as a backfill chunk writes its views."""

from __future__ import annotations

import threading
import time

import pytest

from jobs.write_pool import Stopped, write_each

ITEMS = [f"view-{n}" for n in range(8)]


def test_every_item_is_written_once_and_two_at_a_time() -> None:
    lock, running, most, written = threading.Lock(), [0], [0], []
    both = threading.Barrier(2, timeout=10)  # passes only if the first two writes run at once

    def write(item: str) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        if item in ITEMS[:2]:
            both.wait()
        with lock:
            running[0] -= 1
            written.append(item)

    write_each(ITEMS, write, at_once=2)
    assert sorted(written) == sorted(ITEMS)
    assert most[0] == 2


def test_after_a_failure_no_other_write_begins_and_the_one_under_way_ends_first() -> None:
    begun: list[str] = []
    ended: list[str] = []
    second_begun = threading.Event()

    def write(item: str) -> None:
        begun.append(item)
        if item == ITEMS[0]:
            assert second_begun.wait(10)
            raise RuntimeError("disk full")
        second_begun.set()
        time.sleep(0.5)  # under way when the first fails
        ended.append(item)

    with pytest.raises(RuntimeError, match="disk full"):
        write_each(ITEMS, write, at_once=2)
    assert ended == [ITEMS[1]]  # raised only once the write under way had ended
    assert sorted(begun) == ITEMS[:2]  # and none began after the failure


def test_the_failure_that_happened_first_is_raised_not_the_first_begun() -> None:
    second_failing = threading.Event()

    def write(item: str) -> None:
        if item == ITEMS[0]:
            assert second_failing.wait(10)
            time.sleep(0.3)  # fails after the second
            raise RuntimeError("a follow-on error")
        second_failing.set()
        raise MemoryError("the cause")

    with pytest.raises(MemoryError, match="the cause"):
        write_each(ITEMS[:2], write, at_once=2)


def test_one_at_a_time_writes_in_order() -> None:
    written: list[str] = []
    write_each(ITEMS, written.append, at_once=1)
    assert written == ITEMS


def test_at_least_one_write_at_a_time() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        write_each(ITEMS, print, at_once=0)


def test_a_write_under_way_that_checks_stop_ends_between_its_steps_after_a_failure() -> None:
    stop = threading.Event()
    steps: list[int] = []
    second_begun = threading.Event()

    def write(item: str) -> None:
        if item == ITEMS[0]:
            assert second_begun.wait(10)
            raise RuntimeError("disk full")
        for step in range(50):  # a backfill's runs of dates, one replace each
            if stop.is_set():
                raise Stopped(f"{item}: stopped before step {step}")
            steps.append(step)
            second_begun.set()
            time.sleep(0.05)

    with pytest.raises(RuntimeError, match="disk full"):  # the cause, not the stop that followed it
        write_each(ITEMS[:2], write, at_once=2, stop=stop)
    assert stop.is_set()
    assert 0 < len(steps) < 50  # begun, then ended between two steps, not run to its end


def test_stop_stays_clear_when_every_write_succeeds_and_setting_it_skips_no_write() -> None:
    stop = threading.Event()
    written: list[str] = []
    write_each(ITEMS, written.append, at_once=2, stop=stop)
    assert not stop.is_set() and sorted(written) == sorted(ITEMS)
    stop.set()  # set before: write_each only sets it, so every item is still written
    written.clear()
    write_each(ITEMS, written.append, at_once=2, stop=stop)
    assert sorted(written) == sorted(ITEMS)
