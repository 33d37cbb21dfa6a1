"""What `tally backfill` says on a Ctrl-C, and that the interrupt still ends the command
(``ops.job_commands.backfilled``): a `tally forget` that rebuilds several runs of dates stops too."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

import jobs.backfill
import ops.job_commands
from jobs.backfill import BackfillPlan
from ops.job_commands import CHECKS_INTERRUPTED, INTERRUPTED, backfilled
from tally.tables import BACKFILL_VIEWS

DAY = dt.date(2026, 3, 1)


def backfill_one_day() -> None:
    no_spark: Any = None  # the backfill is replaced: no Spark, no settings
    backfilled(
        no_spark, no_spark, list(BACKFILL_VIEWS), start=DAY, end=DAY, site_id=None, allow_empty=False, progress=False
    )


def interrupt(*args: Any, **kwargs: Any) -> Any:
    raise KeyboardInterrupt


def test_a_ctrl_c_while_the_views_are_written_says_run_it_again_and_ends_the_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    checked: list[object] = []
    monkeypatch.setattr(jobs.backfill, "backfill", interrupt)
    monkeypatch.setattr(ops.job_commands, "check_backfilled", lambda *a: checked.append(a))
    with pytest.raises(KeyboardInterrupt):
        backfill_one_day()
    assert INTERRUPTED in capsys.readouterr().err
    assert checked == []


def test_a_ctrl_c_during_the_checks_says_the_views_are_written_and_what_to_check(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(jobs.backfill, "backfill", lambda *a, **k: BackfillPlan(DAY, DAY, None, {DAY: 3}))
    monkeypatch.setattr(ops.job_commands, "check_backfilled", interrupt)
    with pytest.raises(KeyboardInterrupt):
        backfill_one_day()
    err = capsys.readouterr().err
    assert CHECKS_INTERRUPTED in err and INTERRUPTED not in err
