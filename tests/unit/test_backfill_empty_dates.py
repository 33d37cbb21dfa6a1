"""A backfill keeps the views of dates without raw events, unless told to empty them."""

from __future__ import annotations

import argparse
import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import pytest

from jobs.backfill import BackfillError, BackfillPlan, backfill, date_runs, replaced_dates
from jobs.backfill_chunks import dates_between
from ops.cli import build_parser, cmd_forget
from ops.job_commands import backfill_report_lines, jobs_line, named_views
from tally.settings import load_settings
from tally.tables import BACKFILL_VIEWS, SESSIONS, TRAFFIC_1D, ViewSpec

JAN = [dt.date(2026, 1, d) for d in range(1, 8)]


def test_dates_between_includes_both_ends() -> None:
    assert dates_between(JAN[0], JAN[2]) == JAN[:3]
    assert dates_between(JAN[0], JAN[0]) == [JAN[0]]


@pytest.mark.parametrize(
    ("events", "allow_empty", "replaced"),
    [
        ({d: 5 for d in JAN[:3]}, False, JAN[:3]),  # every date has raw events
        ({JAN[0]: 5, JAN[2]: 1}, False, [JAN[0], JAN[2]]),  # the middle date's raw rows are gone
        ({JAN[0]: 5, JAN[1]: 0}, False, [JAN[0]]),  # a count of 0 is no raw events too
        ({}, False, []),  # retention took them all: nothing is replaced
        ({JAN[0]: 5}, True, JAN[:3]),  # --allow-empty (forget): every date, empty or not
    ],
)
def test_only_dates_with_raw_events_are_replaced_unless_empty_ones_are_allowed(
    events: dict[dt.date, int], allow_empty: bool, replaced: list[dt.date]
) -> None:
    assert replaced_dates(JAN[:3], events, allow_empty=allow_empty) == replaced


@pytest.mark.parametrize(
    ("dates", "runs"),
    [
        ([], []),
        ([JAN[0]], [(JAN[0], JAN[0])]),
        (JAN[:3], [(JAN[0], JAN[2])]),
        ([JAN[0], JAN[2], JAN[3], JAN[6]], [(JAN[0], JAN[0]), (JAN[2], JAN[3]), (JAN[6], JAN[6])]),
        ([JAN[3], JAN[1], JAN[2], JAN[2]], [(JAN[1], JAN[3])]),  # unsorted, repeated
        ([dt.date(2025, 12, 31), dt.date(2026, 1, 1)], [(dt.date(2025, 12, 31), dt.date(2026, 1, 1))]),
    ],
)
def test_dates_split_into_runs_of_consecutive_days_so_each_replaced_range_holds_only_them(
    dates: list[dt.date], runs: list[tuple[dt.date, dt.date]]
) -> None:
    assert date_runs(dates) == runs
    covered = [d for first, last in date_runs(dates) for d in dates_between(first, last)]
    assert covered == sorted(set(dates))


def test_a_plan_names_the_kept_dates_and_allow_empty_keeps_none() -> None:
    kept = BackfillPlan(JAN[0], JAN[2], None, {JAN[0]: 5, JAN[2]: 1})
    assert kept.replaced_dates == [JAN[0], JAN[2]] and kept.kept_dates == [JAN[1]]
    emptied = BackfillPlan(JAN[0], JAN[2], None, {JAN[0]: 5, JAN[2]: 1}, allow_empty=True)
    assert emptied.replaced_dates == JAN[:3] and emptied.kept_dates == []


def test_the_report_names_each_kept_date_and_counts_them() -> None:
    plan = BackfillPlan(JAN[0], JAN[3], "a.test", {JAN[0]: 1200, JAN[3]: 3})
    lines = backfill_report_lines(plan, dry_run=False, views=["agg.traffic_1d"])
    assert lines == [
        "2026-01-01 .. 2026-01-04, site a.test: 1,203 raw events",
        "  2026-01-01: 1,200 events",
        "  2026-01-02: no raw events, views kept",
        "  2026-01-03: no raw events, views kept",
        "  2026-01-04: 3 events",
        "replaced 2 dates in: agg.traffic_1d",
        "kept 2 dates without raw events as they were; --allow-empty replaces them with nothing",
    ]


def test_a_dry_run_report_says_which_dates_would_be_kept_or_emptied() -> None:
    kept = backfill_report_lines(BackfillPlan(JAN[0], JAN[1], None, {JAN[0]: 1}), dry_run=True, views=["v"])
    assert "  2026-01-02: no raw events, views would be kept" in kept
    assert "would replace 1 date in: v" in kept and any(line.startswith("would keep 1 date") for line in kept)
    emptied = BackfillPlan(JAN[0], JAN[1], None, {JAN[0]: 1}, allow_empty=True)
    lines = backfill_report_lines(emptied, dry_run=True, views=["v"])
    assert "  2026-01-02: no raw events, views would be emptied" in lines
    assert "would replace 2 dates in: v" in lines and not any("keep" in line for line in lines)


def test_the_backfill_command_takes_allow_empty() -> None:
    parse = build_parser().parse_args
    assert parse(["backfill", "--from", "2026-01-01", "--to", "2026-01-02"]).allow_empty is False
    assert parse(["backfill", "--from", "2026-01-01", "--to", "2026-01-02", "--allow-empty"]).allow_empty is True


def test_a_dry_run_names_the_spark_jobs_it_would_run() -> None:
    line = jobs_line([(JAN[0], JAN[2]), (JAN[3], JAN[3])], 3_000_000)
    assert line == (
        "in 2 Spark jobs of at most 3,000,000 raw events each (spark.backfill_chunk_events):"
        " 2026-01-01 .. 2026-01-03, 2026-01-04"
    )
    assert jobs_line([(JAN[0], JAN[0])], 5).startswith("in 1 Spark job of at most 5 raw events each")


def test_the_backfill_command_names_views_and_writes_them_in_its_own_order(capsys: pytest.CaptureFixture[str]) -> None:
    parse = build_parser().parse_args
    dates = ["backfill", "--from", "2026-01-01", "--to", "2026-01-02"]
    assert named_views(parse(dates).views) == list(BACKFILL_VIEWS)
    chosen = parse([*dates, "--view", SESSIONS.table, "--view", TRAFFIC_1D.table]).views
    assert named_views(chosen) == [TRAFFIC_1D, SESSIONS]  # traffic before sessions, as every backfill writes
    with pytest.raises(SystemExit):
        parse([*dates, "--view", "agg.nope"])
    assert "invalid choice: 'agg.nope'" in capsys.readouterr().err


def test_a_backfill_of_a_table_that_is_not_a_view_says_which_to_choose() -> None:
    raw = ViewSpec("raw.pageviews", ("event_id",))
    with pytest.raises(BackfillError, match=r"raw.pageviews: not a view a backfill writes; choose from agg\."):
        backfill(None, load_settings(), start=JAN[0], end=JAN[0], views=[raw])  # type: ignore[arg-type]


@dataclass
class _ForgetReport:
    visitor_dates: tuple[dt.date, ...]
    rows_deleted: dict[str, int] = field(default_factory=lambda: {"raw.pageviews": 3})
    files_removed: dict[str, int] = field(default_factory=lambda: {"raw.pageviews": 1})


class _NoWriters:
    def __init__(self, home: Any) -> None:
        pass

    def stop(self, name: str) -> bool:
        return False


def test_forget_empties_the_visitors_own_dates_and_only_those(monkeypatch: pytest.MonkeyPatch) -> None:
    # The visitor may have been alone on a date: its views must go, so forget allows empty dates;
    # but a date between two of theirs without raw events (retention) is not theirs to empty.
    import archiver.maintenance
    import ops.job_commands
    import ops.processes

    backfills: list[dict[str, Any]] = []
    report = _ForgetReport(visitor_dates=(JAN[0], JAN[1], JAN[4]))
    monkeypatch.setattr(archiver.maintenance, "forget", lambda *a, **k: report)
    monkeypatch.setattr(archiver.maintenance, "vacuum_now", lambda *a, **k: 0)
    monkeypatch.setattr(ops.processes, "Supervisor", _NoWriters)

    def run_backfill(settings: Any, **kw: Any) -> int:
        backfills.append(kw)
        return 0

    monkeypatch.setattr(ops.job_commands, "run_backfill", run_backfill)
    args = argparse.Namespace(site="a.test", visitor="v1", before=None, no_backfill=False)
    assert cmd_forget(args, load_settings()) == 0
    assert [(b["start"], b["end"], b["allow_empty"], b["site_id"]) for b in backfills] == [
        (JAN[0], JAN[1], True, "a.test"),
        (JAN[4], JAN[4], True, "a.test"),
    ]


def test_forget_fails_when_rebuilding_the_views_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    import archiver.maintenance
    import ops.job_commands
    import ops.processes

    monkeypatch.setattr(archiver.maintenance, "forget", lambda *a, **k: _ForgetReport(visitor_dates=(JAN[0],)))
    monkeypatch.setattr(archiver.maintenance, "vacuum_now", lambda *a, **k: 0)
    monkeypatch.setattr(ops.processes, "Supervisor", _NoWriters)
    monkeypatch.setattr(ops.job_commands, "run_backfill", lambda settings, **kw: 2)
    args = argparse.Namespace(site="a.test", visitor="v1", before=None, no_backfill=False)
    assert cmd_forget(args, load_settings()) == 2
