"""The quality commands' arguments, their refusals, and the contracts kept in step with the views and config."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
from collections.abc import Callable
from pathlib import Path

import pytest

from ops.quality_commands import add_audit_arguments, add_check_arguments, run_audit
from quality.contracts import CHECKED_TABLES, contracts
from tally.dimensions import TRAFFIC_DIMENSION_NAMES, TRAFFIC_DIMENSIONS, VISIT_DIMENSION_NAMES, VISIT_DIMENSIONS
from tally.settings import QualitySettings, Settings, load_settings
from tally.tables import ALL_VIEWS, BACKFILL_VIEWS

TODAY = dt.datetime.now(dt.UTC).date()


def parse(add: Callable[[argparse.ArgumentParser], None], *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="tally")
    add(parser)
    return parser.parse_args(list(argv))


def test_check_takes_several_tables_and_dates_in_any_form_parse_day_knows() -> None:
    args = parse(add_check_arguments, "--table", "raw.pageviews", "--table", "agg.sessions", "--date", "yesterday")
    assert args.tables == ["raw.pageviews", "agg.sessions"]
    assert args.dates == [TODAY - dt.timedelta(days=1)]
    assert parse(add_check_arguments).tables is None and parse(add_check_arguments).dates is None


def test_check_refuses_a_table_it_has_no_suite_for(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse(add_check_arguments, "--table", "agg.pageviews")
    assert "invalid choice: 'agg.pageviews'" in capsys.readouterr().err


def test_audit_needs_a_date_range() -> None:
    args = parse(add_audit_arguments, "--from", "2026-01-10", "--to", "today", "--site", "a.test")
    assert (args.start, args.end, args.site) == (dt.date(2026, 1, 10), TODAY, "a.test")
    with pytest.raises(SystemExit):
        parse(add_audit_arguments, "--from", "2026-01-10")


def test_an_audit_that_cannot_run_says_why_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = dataclasses.replace(Settings(), home=str(tmp_path))
    backwards = parse(add_audit_arguments, "--from", "2026-01-11", "--to", "2026-01-10")
    assert run_audit(backwards, settings) == 2
    assert "--to 2026-01-10 is before --from 2026-01-11" in capsys.readouterr().err
    assert run_audit(parse(add_audit_arguments, "--from", "today", "--to", "today"), settings) == 2
    assert "no raw table at" in capsys.readouterr().err


def test_every_view_and_both_raw_tables_have_a_contract_with_the_views_own_keys() -> None:
    every = contracts(QualitySettings())
    assert tuple(every) == CHECKED_TABLES
    assert set(CHECKED_TABLES) == {"raw.pageviews", "raw.rejected", *(spec.table for spec in ALL_VIEWS)}
    for spec in ALL_VIEWS:
        assert every[spec.table].keys == spec.keys, spec.table
        assert every[spec.table].partition_by == spec.partition_by


def test_every_view_a_backfill_writes_has_a_contract_so_the_backfill_checks_it() -> None:
    assert {spec.table for spec in BACKFILL_VIEWS} <= set(CHECKED_TABLES)
    assert "agg.props_1d" in CHECKED_TABLES


def test_the_dimension_lists_match_the_views() -> None:
    assert set(TRAFFIC_DIMENSION_NAMES) == {"all", "event", *TRAFFIC_DIMENSIONS}
    assert set(VISIT_DIMENSION_NAMES) == {"all", *VISIT_DIMENSIONS}


def test_the_configuration_file_documents_the_quality_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TALLY_ENV", raising=False)
    assert load_settings().quality == QualitySettings()
    monkeypatch.setenv("TALLY_QUALITY__FRESHNESS_MINUTES", "15")
    assert load_settings().quality.freshness_minutes == 15


def test_thresholds_from_config_reach_the_contracts() -> None:
    strict = contracts(QualitySettings(max_session_hours=2, max_load_seconds=5))
    assert any(r.column == "duration_ms" and r.maximum == 7_200_000 for r in strict["agg.sessions"].ranges)
    assert any(r.column == "load_ms" and r.maximum == 5_000 for r in strict["raw.pageviews"].ranges)
