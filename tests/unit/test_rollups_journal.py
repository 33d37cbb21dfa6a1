"""The roll-ups' journal: a range the traffic query wrote stays journaled until a roll-up covered
it, so a crash (even two in a row, before any roll-up ran) cannot lose it. The real restart:
tests/integration/test_views_restart.py."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest

import jobs.rollups
from jobs.rollup_journal import Touched, from_json, to_json
from jobs.rollups import Rollups, ViewRollups

T0 = dt.datetime(2026, 2, 3, 9, 0)


class MemoryJournal:
    """The journal's file, in memory (the Hadoop-backed one runs in the integration tests)."""

    def __init__(self) -> None:
        self.text = to_json(None)

    def load(self) -> Touched | None:
        return from_json(self.text)

    def save(self, touched: Touched | None) -> None:
        self.text = to_json(touched)


def minutes(first: int, last: int, *sites: str) -> Touched:
    return Touched(frozenset(sites or ("a.test",)), T0 + dt.timedelta(minutes=first), T0 + dt.timedelta(minutes=last))


# `settings` (tests/unit/conftest.py) has a home of its own, with no agg.traffic_1m: recovery is the journal's alone.


def test_a_range_survives_two_crashes_in_a_row_before_any_roll_up(settings: Any) -> None:
    journal = MemoryJournal()
    first_run = Rollups(settings, journal)
    first_run.touch(minutes(0, 56))  # a backlog batch: an hour of minutes, far wider than the watermark
    # crash; the restarted job recovers, writes another batch, and crashes again before rolling up
    second_run = Rollups(settings, journal)
    second_run.recover(None)  # type: ignore[arg-type]
    second_run.touch(minutes(56, 122, "b.test"))
    third_run = Rollups(settings, journal)
    third_run.recover(None)  # type: ignore[arg-type]
    assert third_run.pending == Touched(frozenset({"a.test", "b.test"}), T0, T0 + dt.timedelta(minutes=122))


def test_a_range_leaves_the_journal_only_once_rolled_up_and_comes_back_if_the_roll_up_fails(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal = MemoryJournal()
    rollups = Rollups(settings, journal)
    rolled: list[Touched] = []

    def roll_up(_spark: Any, _settings: Any, touched: Touched, _parts: Any) -> None:
        # A batch written while the roll-up runs is journaled beside the range being rolled up.
        rollups.touch(minutes(200, 201))
        assert journal.load() == minutes(0, 10).union(minutes(200, 201))
        rolled.append(touched)

    monkeypatch.setattr(jobs.rollups, "roll_up", roll_up)
    rollups.touch(minutes(0, 10))
    assert rollups.run_if_due(None, force=True)  # type: ignore[arg-type]
    assert rolled == [minutes(0, 10)]
    assert journal.load() == minutes(200, 201), "only what the roll-up did not cover stays"

    def failing(_spark: Any, _settings: Any, _touched: Touched, _parts: Any) -> None:
        raise RuntimeError("executor lost")

    monkeypatch.setattr(jobs.rollups, "roll_up", failing)
    with pytest.raises(RuntimeError):
        rollups.run_if_due(None, force=True)  # type: ignore[arg-type]
    assert journal.load() == minutes(200, 201) and rollups.pending == minutes(200, 201)


def test_the_journal_text_round_trips_and_an_empty_one_means_nothing_pending() -> None:
    touched = minutes(3, 7, "a.test", "b.test")
    assert from_json(to_json(touched)) == touched
    assert from_json(to_json(None)) is None


def test_the_realtime_windows_and_the_hours_and_days_roll_up_on_their_own_clocks(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = dataclasses.replace(
        settings, spark=dataclasses.replace(settings.spark, rollup_seconds=0, hours_rollup_seconds=3600)
    )
    journals: dict[str, MemoryJournal] = {}
    rollups = ViewRollups(settings, journal=lambda name: journals.setdefault(name, MemoryJournal()))
    rolled: list[tuple[tuple[str, ...], Touched]] = []
    monkeypatch.setattr(jobs.rollups, "roll_up", lambda _s, _t, touched, parts: rolled.append((parts, touched)))
    rollups.touch(minutes(0, 3))
    assert {name: j.load() for name, j in journals.items()} == {
        "rollups-pending.json": minutes(0, 3),  # the hours and days: the file every part used to share
        "rollups-realtime-pending.json": minutes(0, 3),
    }
    assert rollups.run_if_due(None, force=True)  # type: ignore[arg-type]
    assert sorted(rolled) == sorted([(("realtime",), minutes(0, 3)), (("reports",), minutes(0, 3))])
    rolled.clear()
    rollups.touch(minutes(3, 4))
    assert rollups.run_if_due(None)  # type: ignore[arg-type]
    assert rolled == [(("realtime",), minutes(3, 4))], "the hours and days wait for their own clock"
    assert journals["rollups-pending.json"].load() == minutes(3, 4), "and keep their range journaled meanwhile"
    assert journals["rollups-realtime-pending.json"].load() is None


def test_the_realtime_recovery_re_rolls_what_the_hours_and_days_journal_holds(settings: Any) -> None:
    """A journal written before the split held every part under the reports' file name."""
    journals = {"rollups-pending.json": MemoryJournal()}
    journals["rollups-pending.json"].save(minutes(0, 56))
    rollups = ViewRollups(settings, journal=lambda name: journals.setdefault(name, MemoryJournal()))
    rollups.recover(None)  # type: ignore[arg-type]
    assert [member.pending for member in rollups.members] == [minutes(0, 56), minutes(0, 56)]
    assert {member.parts for member in rollups.members} == {("realtime",), ("reports",)}


def test_a_failing_roll_up_does_not_hold_the_other_up_and_keeps_its_range(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    journals: dict[str, MemoryJournal] = {}
    rollups = ViewRollups(settings, journal=lambda name: journals.setdefault(name, MemoryJournal()))
    rolled: list[tuple[str, ...]] = []

    def roll_up(_spark: Any, _settings: Any, _touched: Touched, parts: tuple[str, ...]) -> None:
        if parts == ("realtime",):
            raise RuntimeError("agg.active_5m is broken")
        rolled.append(parts)

    monkeypatch.setattr(jobs.rollups, "roll_up", roll_up)
    rollups.touch(minutes(0, 3))
    with pytest.raises(RuntimeError, match="active_5m"):
        rollups.run_if_due(None, force=True)  # type: ignore[arg-type]
    assert rolled == [("reports",)], "the hours and days were rolled up all the same"
    assert journals["rollups-realtime-pending.json"].load() == minutes(0, 3)
    assert journals["rollups-pending.json"].load() is None
