"""A backfill chunk writes its views two at a time (``jobs.backfill.write_each``)."""

from __future__ import annotations

import threading
import time

import pytest

from jobs.backfill import ROLL_UPS, write_each, write_order
from tally.tables import BACKFILL_VIEWS, SESSIONS, TRAFFIC_1D, TRAFFIC_1H, TRAFFIC_1M, ViewSpec


def test_every_view_is_written_once_and_two_at_a_time() -> None:
    lock, running, most, written = threading.Lock(), [0], [0], []
    both = threading.Barrier(2, timeout=10)  # passes only if two writes run at once

    def write(spec: ViewSpec) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        if spec in BACKFILL_VIEWS[:2]:
            both.wait()
        with lock:
            running[0] -= 1
            written.append(spec)

    write_each(BACKFILL_VIEWS, write, at_once=2)
    assert sorted(written, key=BACKFILL_VIEWS.index) == list(BACKFILL_VIEWS)
    assert most[0] == 2


def test_after_a_failure_no_other_write_begins_and_the_failure_is_raised() -> None:
    begun: list[ViewSpec] = []
    second_begun = threading.Event()

    def write(spec: ViewSpec) -> None:
        begun.append(spec)
        if spec == BACKFILL_VIEWS[0]:
            assert second_begun.wait(10)
            raise RuntimeError("disk full")
        second_begun.set()
        time.sleep(0.5)  # still under way when the first fails; it ends, and no other write begins

    with pytest.raises(RuntimeError, match="disk full"):
        write_each(BACKFILL_VIEWS, write, at_once=2)
    assert sorted(begun, key=BACKFILL_VIEWS.index) == list(BACKFILL_VIEWS[:2])  # none after the failure


def test_one_at_a_time_writes_in_order() -> None:
    written: list[ViewSpec] = []
    write_each(BACKFILL_VIEWS, written.append, at_once=1)
    assert written == list(BACKFILL_VIEWS)


def test_views_from_the_events_begin_first_and_each_roll_up_after_the_view_it_reads() -> None:
    order = write_order(BACKFILL_VIEWS)
    assert sorted(order, key=BACKFILL_VIEWS.index) == list(BACKFILL_VIEWS)
    assert order[:2] == [TRAFFIC_1M, SESSIONS]  # the two heaviest, together
    rolled_up = [spec for spec in order if spec in ROLL_UPS]
    assert order[-len(rolled_up) :] == rolled_up
    for spec, (source, _) in ROLL_UPS.items():
        assert order.index(source) < order.index(spec)
    assert write_order([TRAFFIC_1D, TRAFFIC_1H]) == [TRAFFIC_1H, TRAFFIC_1D]
