"""The budget of raw questions (api/budget.py): slots at once per process, a share per key, a bounded
wait, every slot given back; its settings; and the memory a slot gives the question's DuckDB."""

from __future__ import annotations

import dataclasses
import datetime as dt
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from api.budget import RETRY_AFTER_S, NoSlot, RawBudget
from query import raw_events
from query.aggregates import Range
from query.raw_events import COLUMNS, memory_limit, open_events, slot_limited
from tally.settings import ApiSettings, SettingsError

SITE = "a.example"
LONG_WAIT = 60.0  # a waiter's bound when the test gives the slot back itself (never reached)


def eventually(condition: Callable[[], bool], what: str) -> None:
    """Until ``condition`` holds, looked at a bounded number of times (another thread gets there)."""
    for _ in range(3000):
        if condition():
            return
        time.sleep(0.01)
    raise AssertionError(f"never: {what}")


def test_a_key_may_hold_at_most_its_share_of_the_slots_and_then_is_refused_as_the_key() -> None:
    budget = RawBudget(slots=4, per_key=2, wait_seconds=0)
    with budget.hold("a"), budget.hold("a"):
        with pytest.raises(NoSlot) as refused, budget.hold("a"):
            pass
        assert refused.value.key_share and refused.value.held == 2
        assert refused.value.retry_after == RETRY_AFTER_S
        with budget.hold("b"):  # another key has room of its own
            assert budget.held("a") == 2 and budget.held("b") == 1 and budget.held() == 3
    assert budget.held() == 0


def test_when_every_slot_is_held_another_key_is_refused_as_the_whole_process_busy() -> None:
    budget = RawBudget(slots=2, per_key=1, wait_seconds=0)
    with budget.hold("a"), budget.hold("b"), pytest.raises(NoSlot) as refused, budget.hold("c"):
        pass
    assert not refused.value.key_share and refused.value.held == 0 and refused.value.slots == 2


def test_a_question_that_raises_gives_its_slot_back() -> None:
    budget = RawBudget(slots=1, per_key=1, wait_seconds=0)
    for _ in range(3):
        with pytest.raises(RuntimeError), budget.hold("a"):
            raise RuntimeError("a question failing half way")
    assert budget.held() == 0
    with budget.hold("a"):  # and the next one gets it
        assert budget.held("a") == 1


def test_a_refused_question_takes_no_slot() -> None:
    budget = RawBudget(slots=1, per_key=1, wait_seconds=0)
    with budget.hold("a"):
        for key in ("a", "b"):
            with pytest.raises(NoSlot), budget.hold(key):
                pass
        assert budget.held() == 1 and budget.held("b") == 0 and budget.waiting() == 0
    assert budget.held() == 0


def test_a_question_waiting_for_a_slot_gets_the_one_given_back_within_its_wait() -> None:
    budget = RawBudget(slots=1, per_key=1, wait_seconds=LONG_WAIT)
    release, outcome = threading.Event(), []

    def waiter() -> None:
        with budget.hold("b"):
            outcome.append(budget.held("b"))

    def holder() -> None:
        with budget.hold("a"):
            release.wait(LONG_WAIT)

    first = threading.Thread(target=holder)
    first.start()
    eventually(lambda: budget.held("a") == 1, "the holder has its slot")
    second = threading.Thread(target=waiter)
    second.start()
    eventually(lambda: budget.waiting() == 1, "the second question waits for it")
    assert outcome == [], "no slot while the holder holds the only one"
    release.set()
    first.join(LONG_WAIT)
    second.join(LONG_WAIT)
    assert outcome == [1] and budget.held() == 0


def test_a_slot_given_back_by_its_own_key_lets_that_key_waiting_at_its_share_in() -> None:
    budget = RawBudget(slots=4, per_key=1, wait_seconds=LONG_WAIT)
    release, outcome = threading.Event(), []

    def own_first() -> None:
        with budget.hold("a"):
            release.wait(LONG_WAIT)

    def own_second() -> None:
        with budget.hold("a"):
            outcome.append("answered")

    first = threading.Thread(target=own_first)
    first.start()
    eventually(lambda: budget.held("a") == 1, "the key's first question has its slot")
    second = threading.Thread(target=own_second)
    second.start()
    eventually(lambda: budget.waiting() == 1, "the key's second question waits at its share")
    with budget.hold("b"):  # free slots do not let the key past its share, but another key in
        assert outcome == []
    release.set()
    first.join(LONG_WAIT)
    second.join(LONG_WAIT)
    assert outcome == ["answered"]


def test_a_wait_that_ends_without_a_slot_is_a_refusal() -> None:
    budget = RawBudget(slots=1, per_key=1, wait_seconds=0.05)
    with budget.hold("a"), pytest.raises(NoSlot), budget.hold("b"):
        pass
    assert budget.waiting() == 0


def test_budget_settings_that_cannot_work_are_refused_naming_the_key() -> None:
    base = ApiSettings()
    defaults = (base.raw_slots, base.raw_slots_per_key, base.raw_threads, base.raw_memory, base.raw_wait_seconds)
    assert defaults == (4, 1, 1, "4g", 2.0)
    assert base.raw_slot_memory_bytes == 1 << 30
    for changes, key in (
        ({"raw_slots": 0}, "api.raw_slots"),
        ({"raw_slots_per_key": 0}, "api.raw_slots_per_key"),
        ({"raw_slots_per_key": 5}, "api.raw_slots_per_key"),
        ({"raw_memory": "4GB"}, "api.raw_memory"),
        ({"raw_memory": "1g", "raw_slots": 8}, "api.raw_memory"),
        ({"raw_threads": 0}, "api.raw_threads"),
        ({"raw_threads": 65}, "api.raw_threads"),
        ({"raw_wait_seconds": -1.0}, "api.raw_wait_seconds"),
        ({"raw_wait_seconds": 31.0}, "api.raw_wait_seconds"),
    ):
        with pytest.raises(SettingsError, match=key):
            dataclasses.replace(base, **changes)


def test_a_raw_connection_gets_its_slots_memory_and_threads_and_a_spill_directory_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    day = dt.date(2026, 3, 1)
    columns = {"site_id": pa.array([], pa.string()), "event_date": pa.array([], pa.date32())}
    events = ds.dataset(pa.table({**columns, "is_bot": pa.array([], pa.bool_())}))
    asked = "SELECT current_setting('memory_limit'), current_setting('temp_directory'), current_setting('threads')"
    assert memory_limit() == raw_events.MEMORY_LIMIT, "outside a slot: the dashboard's limit"
    with (
        slot_limited("512MiB", 1),
        open_events(events, SITE, Range(day, day), COLUMNS) as one,
        open_events(events, SITE, Range(day, day), COLUMNS) as two,
    ):
        found = [con.execute(asked).fetchone() for con in (one, two)]
    assert memory_limit() == raw_events.MEMORY_LIMIT, "the slot's limit ends with the block"
    assert [row[0] for row in found if row] == ["512.0 MiB"] * 2
    assert [row[2] for row in found if row] == [1] * 2, "the slot's threads"
    spills = [Path(row[1]) for row in found if row]
    assert spills[0] != spills[1] and {d.parent for d in spills} == {raw_events.spill_dir()}
