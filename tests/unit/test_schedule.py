"""``tally schedule``: due times, once per minute, skipped catch-up, errors and the CLI modes.

A fake clock, sleep and runner stand in for time and subprocesses, so no real time passes.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ops.schedule import (
    Scheduler,
    UnknownJobError,
    add_arguments,
    run,
    run_subprocess,
    stop_on_signals,
    tally_argv,
)
from tally.settings import ScheduledJob, Settings, SettingsError

NIGHTLY = ScheduledJob("nightly-backfill", "30 2 * * *", ("backfill", "--from", "yesterday", "--to", "yesterday"))
WEEKLY = ScheduledJob("weekly-maintenance", "0 4 * * 0", ("maintain",))
EVERY_5 = ScheduledJob("every-5", "*/5 * * * *", ("status",))
SUNDAY = datetime(2026, 3, 1, tzinfo=UTC)  # 2026-03-01 is a Sunday


def at(hour: int, minute: int, second: int = 0, *, day: int = 0) -> datetime:
    return SUNDAY + timedelta(days=day, hours=hour, minutes=minute, seconds=second)


class FakeClock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


class FakeRunner:
    """Records each job it runs; returns the exit code (or raises the exception) set for its name."""

    def __init__(self, outcomes: dict[str, int | Exception] | None = None) -> None:
        self.outcomes = outcomes or {}
        self.ran: list[str] = []

    def __call__(self, job: ScheduledJob) -> int:
        self.ran.append(job.name)
        outcome = self.outcomes.get(job.name, 0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def scheduler(*jobs: ScheduledJob, runner: FakeRunner | None = None, now: datetime = SUNDAY) -> Scheduler:
    return Scheduler(
        jobs=jobs, run_command=runner or FakeRunner(), clock=FakeClock(now), sleep=lambda s: None, monotonic=lambda: 0.0
    )


def fields(record: logging.LogRecord) -> dict[str, Any]:
    """The structured ``kv`` fields of a log line."""
    found: dict[str, Any] = record.__dict__["fields"]
    return found


def cli_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tally schedule")
    add_arguments(parser)
    return parser.parse_args(argv)


def test_a_job_is_due_in_every_second_of_the_minute_its_cron_matches_and_no_other() -> None:
    s = scheduler(NIGHTLY, WEEKLY)
    assert s.due(at(2, 30)) == [NIGHTLY]
    assert s.due(at(2, 30, 59)) == [NIGHTLY]
    assert s.due(at(2, 29, 59)) == []
    assert s.due(at(2, 31)) == []
    assert s.due(at(4, 0)) == [WEEKLY]  # a Sunday
    assert s.due(at(4, 0, day=1)) == []  # a Monday


def test_next_runs_are_the_next_fire_times_after_now_in_utc() -> None:
    s = scheduler(NIGHTLY, WEEKLY)
    assert s.next_runs(at(2, 30, 20)) == {"nightly-backfill": at(2, 30, day=1), "weekly-maintenance": at(4, 0)}
    assert s.next_runs(at(5, 0)) == {"nightly-backfill": at(2, 30, day=1), "weekly-maintenance": at(4, 0, day=7)}


def test_a_due_job_runs_once_even_when_the_scheduler_wakes_twice_in_the_same_minute() -> None:
    runner = FakeRunner()
    s = scheduler(NIGHTLY, WEEKLY, runner=runner)
    assert [r.name for r in s.run_pending(at(2, 30, 0))] == ["nightly-backfill"]
    assert s.run_pending(at(2, 30, 1)) == []
    assert s.run_pending(at(2, 30, 59)) == []
    assert runner.ran == ["nightly-backfill"]


def test_a_job_runs_again_at_each_later_matching_minute() -> None:
    runner = FakeRunner()
    s = scheduler(EVERY_5, runner=runner)
    for minute in range(11):
        s.run_pending(at(3, minute, 30))
    assert runner.ran == ["every-5"] * 3  # 03:00, 03:05, 03:10


def test_starting_up_runs_nothing_that_fired_before_the_first_check() -> None:
    runner = FakeRunner()
    s = scheduler(NIGHTLY, runner=runner)
    assert s.run_pending(at(2, 31)) == []
    assert runner.ran == []


def test_after_a_long_sleep_only_the_latest_missed_run_happens_and_the_others_are_logged_as_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runner = FakeRunner()
    s = scheduler(EVERY_5, NIGHTLY, runner=runner)
    s.run_pending(at(1, 0, 30))
    with caplog.at_level(logging.WARNING, logger="tally.ops.schedule"):
        done = s.run_pending(at(2, 2, 10))  # woken 62 minutes later: 01:05 .. 02:00 fired meanwhile
    assert runner.ran == ["every-5", "every-5"]  # 01:00, then only 02:00 of the twelve missed
    assert done[0].scheduled_for == at(2, 0)
    skipped = [r for r in caplog.records if r.getMessage() == "job runs skipped"]
    assert [fields(r)["job"] for r in skipped] == ["every-5"]
    assert fields(skipped[0])["skipped"] == "11"
    assert fields(skipped[0])["first"] == "2026-03-01T01:05Z"


def test_a_job_that_fired_while_another_was_running_runs_once_when_that_one_ends() -> None:
    clock = FakeClock(at(2, 30))

    def slow_runner(job: ScheduledJob) -> int:
        if job is NIGHTLY:
            clock.now = at(4, 45)  # a long backfill: the 04:00 maintenance fires meanwhile
        return 0

    s = Scheduler(jobs=(NIGHTLY, WEEKLY), run_command=slow_runner, clock=clock, sleep=lambda s: None)
    assert [r.name for r in s.run_pending(clock())] == ["nightly-backfill"]
    late = s.run_pending(clock())
    assert [(r.name, r.scheduled_for) for r in late] == [("weekly-maintenance", at(4, 0))]


@pytest.mark.parametrize(
    ("cron", "advice"),
    [
        ("61 * * * *", "e.g. '30 2 * * *'"),
        ("30 2 * *", "is not a 5-field cron expression"),
        ("every night", "is not a 5-field cron expression"),
        ("30 2 * * * *", "is not a 5-field cron expression"),
        ("0 0 31 2 *", "never fires"),
        ("30 2 * * funday", "e.g. '30 2 * * *'"),
    ],
)
def test_a_bad_cron_expression_is_a_settings_error_naming_the_job_and_the_expression(cron: str, advice: str) -> None:
    with pytest.raises(SettingsError) as raised:
        scheduler(NIGHTLY, ScheduledJob("hourly-report", cron, ("status",)))
    message = str(raised.value)
    assert "schedule[1].cron" in message and "'hourly-report'" in message and repr(cron) in message
    assert advice in message


def test_jobs_without_a_command_or_with_a_duplicate_name_are_refused_at_start_up() -> None:
    with pytest.raises(SettingsError, match=r"schedule\[0\]\.command .*e\.g\. \[backfill"):
        scheduler(ScheduledJob("empty", "* * * * *"))
    with pytest.raises(SettingsError, match=r"schedule\[0\]\.command"):
        scheduler(ScheduledJob("loop", "* * * * *", ("schedule",)))
    with pytest.raises(SettingsError, match=r"schedule\[1\]\.name: every job needs a name of its own"):
        scheduler(NIGHTLY, NIGHTLY)


def test_a_failing_job_is_logged_with_its_exit_code_and_does_not_stop_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    broken = ScheduledJob("broken", "30 2 * * *", ("maintain",))
    crashing = ScheduledJob("crashing", "30 2 * * *", ("maintain",))
    runner = FakeRunner({"broken": 3, "crashing": OSError("no such interpreter")})
    s = scheduler(broken, crashing, NIGHTLY, runner=runner)
    with caplog.at_level(logging.INFO, logger="tally.ops.schedule"):
        done = s.run_pending(at(2, 30))
    assert [(r.name, r.exit_code, r.ok) for r in done] == [
        ("broken", 3, False),
        ("crashing", None, False),
        ("nightly-backfill", 0, True),
    ]
    failed = [r for r in caplog.records if r.getMessage() == "job failed"]
    assert [(fields(r)["job"], fields(r)["exit_code"]) for r in failed] == [("broken", 3), ("crashing", None)]
    assert any(r.getMessage() == "job could not run" and r.exc_info for r in caplog.records)
    assert s.run_pending(at(2, 35)) == []  # still scheduling afterwards


def test_list_shows_each_job_with_its_cron_next_run_and_command(capsys: pytest.CaptureFixture[str]) -> None:
    s = scheduler(NIGHTLY, WEEKLY, now=at(3, 0))
    assert s.describe(at(3, 0)) == [
        "NAME                CRON        NEXT RUN (UTC)    COMMAND",
        "nightly-backfill    30 2 * * *  2026-03-02 02:30  tally backfill --from yesterday --to yesterday",
        "weekly-maintenance  0 4 * * 0   2026-03-01 04:00  tally maintain",
    ]
    assert run(cli_args("--list"), Settings(), scheduler=s) == 0
    assert capsys.readouterr().out.splitlines() == s.describe(at(3, 0))


def test_run_now_of_an_unknown_name_is_an_error_that_lists_the_configured_jobs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    s = scheduler(NIGHTLY, WEEKLY)
    with pytest.raises(UnknownJobError) as raised:
        s.run_now("nightly")
    known = "configured jobs: nightly-backfill, weekly-maintenance"
    assert str(raised.value) == f"no scheduled job is named 'nightly'; {known}"
    assert run(cli_args("--run", "nightly"), Settings(), scheduler=s) == 2
    assert known in capsys.readouterr().err


def test_running_forever_without_configured_jobs_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(cli_args(), Settings()) == 2
    assert "add a schedule: section to conf/tally.yaml" in capsys.readouterr().err


def test_run_now_runs_the_named_job_whatever_its_schedule_and_the_exit_code_follows_it() -> None:
    runner = FakeRunner({"weekly-maintenance": 1})
    s = scheduler(NIGHTLY, WEEKLY, runner=runner, now=at(12, 0, day=3))
    assert run(cli_args("--run", "nightly-backfill"), Settings(), scheduler=s) == 0
    assert run(cli_args("--run", "weekly-maintenance"), Settings(), scheduler=s) == 1
    assert runner.ran == ["nightly-backfill", "weekly-maintenance"]


def test_once_runs_only_what_is_due_now_and_fails_when_a_job_fails() -> None:
    runner = FakeRunner({"weekly-maintenance": 2})
    assert run(cli_args("--once"), Settings(), scheduler=scheduler(NIGHTLY, WEEKLY, runner=runner, now=at(2, 30))) == 0
    assert run(cli_args("--once"), Settings(), scheduler=scheduler(NIGHTLY, WEEKLY, runner=runner, now=at(4, 0))) == 1
    assert run(cli_args("--once"), Settings(), scheduler=scheduler(NIGHTLY, WEEKLY, runner=runner, now=at(9, 0))) == 0
    assert runner.ran == ["nightly-backfill", "weekly-maintenance"]


def test_run_forever_sleeps_in_short_steps_until_the_next_run_and_stops_when_asked() -> None:
    clock = FakeClock(at(2, 29, 58, day=1))
    runner = FakeRunner()
    stop = threading.Event()
    naps: list[float] = []

    def sleep(seconds: float) -> None:
        naps.append(seconds)
        clock.now += timedelta(seconds=seconds)
        if clock.now >= at(2, 31, day=1):
            stop.set()

    Scheduler(jobs=(NIGHTLY,), run_command=runner, clock=clock, sleep=sleep).run_forever(stop)
    assert runner.ran == ["nightly-backfill"]
    assert naps[:2] == [1.0, 1.0] and max(naps) <= 1.0
    assert clock.now == at(2, 31, day=1)  # woke on the minute, then stopped promptly


def test_sigterm_sets_the_stop_event_and_the_old_handler_comes_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    stop = threading.Event()
    with stop_on_signals(stop):
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(5)
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_default_runner_runs_tally_with_this_python_in_the_given_folder_and_returns_its_exit_code(
    tmp_path: Path,
) -> None:
    assert tally_argv(NIGHTLY) == [sys.executable, "-m", "tally", *NIGHTLY.command]
    exit_3_if_in_folder = "import os, sys; sys.exit(3 if os.getcwd() == sys.argv[1] else 7)"
    assert run_subprocess([sys.executable, "-c", exit_3_if_in_folder, str(tmp_path)], cwd=str(tmp_path)) == 3
