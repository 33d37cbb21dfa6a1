"""Alert rules with injected figures and clocks; the quiet period; report periods."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

import pandas as pd
import pytest

from notify import rules
from notify.incidents import Incident, step
from notify.observe import same_hour_history
from notify.periods import due_period, previous_period
from query.aggregates import Range

T0 = dt.datetime(2026, 3, 9, 10, 5, tzinfo=dt.UTC)
HOUR = dt.datetime(2026, 3, 9, 9, tzinfo=dt.UTC)
QUIET = dt.timedelta(minutes=60)
STEADY = (100, 96, 104, 99, 101, 98, 102, 100)  # median 100, MAD 2: spread sqrt(100) = 10


def at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


@pytest.mark.parametrize(
    ("pageviews", "above", "below", "firing"),
    [(500, 400, 0, True), (400, 400, 0, False), (3, 0, 5, True), (5, 0, 5, False), (10**6, 0, 0, False)],
)
def test_a_threshold_fires_only_past_its_set_side(pageviews: int, above: int, below: int, firing: bool) -> None:
    assert rules.traffic_threshold("a", HOUR, pageviews, above=above, below=below).firing is firing


def test_median_and_mad_are_the_robust_centre_and_spread() -> None:
    assert rules.median_and_mad([1, 2, 3, 4, 100]) == (3, 1)


@pytest.mark.parametrize(("pageviews", "firing"), [(150, False), (151, True), (50, False), (49, True)])
def test_traffic_far_from_usual_is_outside_median_plus_minus_factor_times_spread(pageviews: int, firing: bool) -> None:
    found = rules.traffic_unusual("a", HOUR, pageviews, STEADY, factor=5, min_days=7)
    assert found.firing is firing
    if firing:
        assert "usual 100" in found.summary and "± 50" in found.summary


def test_traffic_far_from_usual_needs_enough_history_and_can_be_off() -> None:
    assert not rules.traffic_unusual("a", HOUR, 10_000, STEADY[:6], factor=5, min_days=7).firing
    assert not rules.traffic_unusual("a", HOUR, 10_000, STEADY, factor=0, min_days=7).firing


def test_a_quiet_site_needs_more_than_chance_swings_to_be_unusual() -> None:
    history = (0, 1, 0, 2, 0, 1, 0, 1)  # median 0.5, MAD 0.5: the floor of 1 keeps 5 page views usual
    assert not rules.traffic_unusual("a", HOUR, 5, history, factor=5, min_days=7).firing
    assert rules.traffic_unusual("a", HOUR, 6, history, factor=5, min_days=7).firing


def test_tracking_stopped_fires_on_silence_where_page_views_are_usual() -> None:
    silent_since = T0 - dt.timedelta(minutes=61)
    found = rules.tracking_stopped("a", T0, silent_since, STEADY, minutes=60, min_days=7)
    assert found.firing and "no page view since 2026-03-09 09:04" in found.summary
    assert rules.tracking_stopped("a", T0, None, STEADY, minutes=60, min_days=7).firing


@pytest.mark.parametrize(
    ("newest_minutes_ago", "history", "why"),
    [
        (59, STEADY, "silent less than the span"),
        (600, (2, 3, 2, 1, 2, 3, 2, 2), "the span usually holds fewer than 3"),
        (600, STEADY[:3], "too little history"),
    ],
)
def test_tracking_stopped_stays_quiet(newest_minutes_ago: int, history: tuple[int, ...], why: str) -> None:
    newest = T0 - dt.timedelta(minutes=newest_minutes_ago)
    assert not rules.tracking_stopped("a", T0, newest, history, minutes=60, min_days=7).firing, why


@pytest.mark.parametrize(
    ("recent", "baseline", "firing"), [(60, 10.0, True), (49, 1.0, False), (60, 12.1, False), (0, 0.0, False)]
)
def test_a_dead_letter_surge_needs_the_minimum_and_the_factor(recent: int, baseline: float, firing: bool) -> None:
    found = rules.deadletter_surge(recent, baseline, window_minutes=15, min_count=50, factor=5)
    assert found.firing is firing and found.site == rules.EVERY_SITE


def test_a_lag_fires_only_when_known_and_over_the_limit() -> None:
    limit = dt.timedelta(minutes=10)
    assert rules.lag("views_lag", "a", dt.timedelta(minutes=11), limit, "the views are").firing
    assert not rules.lag("views_lag", "a", dt.timedelta(minutes=10), limit, "the views are").firing
    assert not rules.lag("archive_lag", "*", None, limit, "the archive is").firing


def test_a_quarantined_partition_fires_and_names_it() -> None:
    found = rules.quarantine("a", ["agg.traffic_1d 2026-03-08 (suite)"])
    assert found.firing and "agg.traffic_1d 2026-03-08" in found.summary
    assert not rules.quarantine("a", []).firing


def run(verdicts: Sequence[tuple[float, bool]]) -> list[tuple[float, str]]:
    """Step one incident through (minute, firing) checks; the actions taken, by minute."""
    state, sent = Incident(), list[tuple[float, str]]()
    for minute, firing in verdicts:
        state, action = step(state, firing, at(minute), QUIET, "why")
        if action:
            sent.append((minute, action))
    return sent


def test_one_incident_sends_one_alert_however_long_it_lasts_then_one_recovery() -> None:
    assert run([(0, False), (5, True), (10, True), (200, True), (205, False), (210, False)]) == [
        (5, "alert"),
        (205, "recovery"),
    ]


def test_a_flapping_condition_within_the_quiet_period_sends_nothing_more() -> None:
    checks = [(0, True), (5, False), (10, True), (15, False), (20, True), (25, False)]
    assert run(checks) == [(0, "alert"), (5, "recovery")]


def test_an_incident_held_back_by_the_quiet_period_is_announced_once_it_is_over() -> None:
    assert run([(0, True), (5, False), (10, True), (30, True), (61, True), (90, True)]) == [
        (0, "alert"),
        (5, "recovery"),
        (61, "alert"),
    ]


def test_a_new_incident_after_the_quiet_period_alerts_again() -> None:
    assert run([(0, True), (5, False), (70, True)]) == [(0, "alert"), (5, "recovery"), (70, "alert")]


@pytest.mark.parametrize(
    ("period", "today", "expected"),
    [
        ("weekly", dt.date(2026, 3, 9), Range(dt.date(2026, 3, 2), dt.date(2026, 3, 8))),  # a Monday
        ("weekly", dt.date(2026, 3, 15), Range(dt.date(2026, 3, 2), dt.date(2026, 3, 8))),  # the Sunday after
        ("monthly", dt.date(2026, 3, 1), Range(dt.date(2026, 2, 1), dt.date(2026, 2, 28))),
        ("monthly", dt.date(2026, 1, 20), Range(dt.date(2025, 12, 1), dt.date(2025, 12, 31))),
    ],
)
def test_the_due_period_is_the_newest_complete_week_or_month(period: str, today: dt.date, expected: Range) -> None:
    assert due_period(period, today) == expected


def test_the_previous_period_is_the_same_length_just_before_as_on_the_dashboard() -> None:
    february = Range(dt.date(2026, 2, 1), dt.date(2026, 2, 28))
    assert previous_period(february) == Range(dt.date(2026, 1, 4), dt.date(2026, 1, 31))


def test_the_history_is_the_same_hour_on_earlier_days_from_the_first_data_on_with_missing_hours_as_zero() -> None:
    hours = pd.to_datetime(["2026-03-05 09:00", "2026-03-05 10:00", "2026-03-07 09:00", "2026-03-08 08:00"], utc=True)
    hourly = pd.Series([7, 99, 5, 1], index=hours)
    assert same_hour_history(hourly, HOUR, days=28) == (7, 0, 5, 0)  # 5th to 8th March, 09:00
    assert same_hour_history(hourly, HOUR, days=2) == (5, 0)
    assert same_hour_history(pd.Series(dtype=int), HOUR, days=28) == ()
