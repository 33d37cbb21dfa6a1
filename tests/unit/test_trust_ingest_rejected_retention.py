"""raw.rejected has a retention of its own (archiver.rejected_retention_days, 30 days by default),
applied by `tally maintain` even when raw.pageviews is kept forever: dead letters hold whole
client-sent payloads, and anyone can send them."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from archiver.maintenance import maintain, retention_of
from archiver.tables import utc_today
from ops.cli import build_parser
from tally.settings import ArchiverSettings, Settings, SettingsError
from tally.storage import append_rows, open_table
from tally.table_schemas import RAW_LAYOUT
from tally.tables import RAW_PAGEVIEWS, RAW_REJECTED


def days_ago(days: int) -> dt.date:
    return utc_today() - dt.timedelta(days=days)


@pytest.fixture
def aged_warehouse(settings: Settings) -> Settings:
    """The settings, with dead letters of 40 and 5 days ago and a page view of 40 days ago in their warehouse."""
    for name, rows in (
        (RAW_REJECTED, [{"kind": "malformed_json", "rejected_date": days_ago(d)} for d in (40, 5)]),
        (RAW_PAGEVIEWS, [{"event_id": "e1", "event_date": days_ago(40)}]),
    ):
        schema, partition_by = RAW_LAYOUT[name]
        append_rows(settings, name, pa.Table.from_pylist(rows, schema=schema), partition_by=[partition_by])
    return settings


def dates(settings: Settings, name: str) -> list[dt.date]:
    column = RAW_LAYOUT[name][1]
    return sorted(open_table(settings, name).to_pyarrow_table(columns=[column])[column].to_pylist())


def test_maintain_expires_dead_letters_after_30_days_while_page_views_are_kept(aged_warehouse: Settings) -> None:
    reports = {r.table: r for r in maintain(aged_warehouse, vacuum_hours=168, retention_days=0)}
    assert reports[RAW_REJECTED].rows_expired == 1 and reports[RAW_PAGEVIEWS].rows_expired == 0
    assert dates(aged_warehouse, RAW_REJECTED) == [days_ago(5)]
    assert dates(aged_warehouse, RAW_PAGEVIEWS) == [days_ago(40)]


def test_the_rejected_retention_can_be_set_on_the_command_line(
    aged_warehouse: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    args = build_parser().parse_args(["maintain", "--rejected-retention-days", "3"])
    assert args.handler(args, aged_warehouse) == 0
    assert "raw.rejected: 0 small files compacted, 0 old files vacuumed, 2 rows past retention deleted" in (
        capsys.readouterr().out
    )
    assert dates(aged_warehouse, RAW_REJECTED) == []


@pytest.mark.parametrize(("general", "rejected", "kept"), [(0, 30, 30), (0, 0, 0), (7, 30, 7), (60, 30, 30), (7, 0, 7)])
def test_dead_letters_are_never_kept_longer_than_the_events(general: int, rejected: int, kept: int) -> None:
    assert retention_of(RAW_REJECTED, retention_days=general, rejected_retention_days=rejected) == kept
    assert retention_of(RAW_PAGEVIEWS, retention_days=general, rejected_retention_days=rejected) == general


def test_a_negative_rejected_retention_is_a_settings_error_naming_the_key() -> None:
    with pytest.raises(SettingsError, match=r"archiver.rejected_retention_days: -1 must be 0"):
        ArchiverSettings(rejected_retention_days=-1)
