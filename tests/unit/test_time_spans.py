"""Time spans (``spark.watermark``, ``spark.session_gap``): parsed once by the settings, written back
as Spark's interval text and for people, and used as such by the dashboard and the jobs."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import dashboard.page
import dashboard.questions
from dashboard.view import View
from query.aggregates import Range
from query.sources import Sources
from tally.settings import Settings, load_settings
from tally.spans import describe_span, parse_span, spark_interval


@pytest.mark.parametrize(
    ("text", "span"),
    [
        ("10 minutes", dt.timedelta(minutes=10)),
        ("1 hour", dt.timedelta(hours=1)),
        ("1 day", dt.timedelta(days=1)),
        ("2 days", dt.timedelta(days=2)),
        ("90 seconds", dt.timedelta(seconds=90)),
        (" 30 Minutes ", dt.timedelta(minutes=30)),
        ("30minutes", dt.timedelta(minutes=30)),
    ],
)
def test_a_time_span_is_read_in_seconds_minutes_hours_or_days(text: str, span: dt.timedelta) -> None:
    assert parse_span(text) == span


@pytest.mark.parametrize(
    "text", ["ten minutes", "3 fortnights", "1.5 hours", "-5 minutes", "30", "", "1 hour 30 minutes"]
)
def test_anything_else_is_not_a_time_span(text: str) -> None:
    with pytest.raises(ValueError, match=r"is not a time span like '30 minutes' \(seconds, minutes, hours or days\)"):
        parse_span(text)


@pytest.mark.parametrize(
    ("span", "spark", "people"),
    [
        (dt.timedelta(minutes=30), "30 minutes", "30 minutes"),
        (dt.timedelta(days=1), "1 day", "1 day"),
        (dt.timedelta(hours=36), "36 hours", "36 hours"),
        (dt.timedelta(minutes=1), "1 minute", "1 minute"),
        (dt.timedelta(seconds=1501), "1501 seconds", "1,501 seconds"),
    ],
)
def test_a_span_is_written_in_its_largest_whole_unit(span: dt.timedelta, spark: str, people: str) -> None:
    assert spark_interval(span) == spark
    assert describe_span(span) == people


@given(st.integers(min_value=0, max_value=10**8).map(lambda s: dt.timedelta(seconds=s)))
def test_spark_interval_text_reads_back_as_the_same_span(span: dt.timedelta) -> None:
    assert parse_span(spark_interval(span)) == span


def settings_with(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spark_yaml: str) -> Settings:
    monkeypatch.delenv("TALLY_ENV", raising=False)
    (tmp_path / "tally.yaml").write_text(f"home: {tmp_path}\nspark: {{{spark_yaml}}}\n")
    return load_settings(tmp_path)


def test_a_session_gap_of_a_day_reaches_the_dashboards_raw_drill_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = settings_with(tmp_path, monkeypatch, "session_gap: 1 day")
    # The drill-down reads the raw table's snapshot the page's aggregate reader keeps: version 3.
    monkeypatch.setattr("query.aggregates.Aggregates.snapshot", lambda self, name: (3, "raw events"))
    days = Range(dt.date(2026, 1, 1), dt.date(2026, 1, 7))
    sources = Sources(settings, dashboard.page.aggregates(settings))  # the page run's one
    drill_down = dashboard.questions.raw_report(sources, View("demo.tally.local"), days)
    assert drill_down is not None and drill_down.gap_ms == 86_400_000


def test_a_session_gap_of_a_day_reaches_spark_as_interval_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = settings_with(tmp_path, monkeypatch, "session_gap: 1 day, watermark: 2 hours")
    assert spark_interval(settings.spark.session_gap) == "1 day"
    assert spark_interval(settings.spark.watermark) == "2 hours"
