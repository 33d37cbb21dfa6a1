"""The dashboard page logic with Streamlit's AppTest (no server, no browser)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from quality.quarantine import PartitionStatus, record_statuses
from tally.settings import load_settings

APP = str(Path(__file__).parents[2] / "dashboard" / "app.py")


def test_the_dashboard_warns_about_quarantined_partitions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TALLY_HOME", str(tmp_path))
    settings = load_settings()
    day = dt.date(2026, 1, 10)
    record_statuses(
        settings,
        [PartitionStatus("agg.traffic_1h", day, "audit", True, "run-1", dt.datetime.now(dt.UTC), ("pageviews",))],
    )
    app = AppTest.from_file(APP, default_timeout=30).run()
    assert not app.exception
    assert any("agg.traffic_1h 2026-01-10" in w.value for w in app.warning)


def test_the_dashboard_shows_no_warning_when_every_partition_passed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TALLY_HOME", str(tmp_path))
    app = AppTest.from_file(APP, default_timeout=30).run()
    assert not app.exception
    assert not app.warning
