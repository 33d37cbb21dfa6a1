"""Which minutes the traffic sink moves to files of their own after a batch (settle_range): pure logic."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest

import jobs.batch_writers
from jobs.batch_writers import SETTLED_SPAN, settle, settle_range

WATERMARK = dt.timedelta(minutes=10)
DAY = dt.datetime(2026, 11, 27)


def at(hour: int, minute: int) -> dt.datetime:
    return DAY + dt.timedelta(hours=hour, minutes=minute)


def test_after_a_start_the_date_is_settled_up_to_the_last_whole_span_the_watermark_passed() -> None:
    # Newest minute 10:40: minutes up to 10:29 can no longer change; the last whole span ends 10:15.
    assert dt.timedelta(minutes=15) == SETTLED_SPAN
    assert settle_range(at(10, 40), WATERMARK, None) == (DAY, at(10, 15))


def test_then_only_the_spans_closed_since() -> None:
    assert settle_range(at(10, 40), WATERMARK, at(10, 15)) is None
    assert settle_range(at(10, 55), WATERMARK, at(10, 15)) == (at(10, 15), at(10, 30))
    # A catch-up that jumps several spans settles them in one go.
    assert settle_range(at(12, 0), WATERMARK, at(10, 30)) == (at(10, 30), at(11, 45))


def test_a_span_is_settled_only_once_the_watermark_and_a_minute_have_passed_its_end() -> None:
    # The span 10:00-10:15 closes when the newest minute is 10:26 (10:15 + 10 min + 1 min).
    assert settle_range(at(10, 25), WATERMARK, at(10, 0)) is None
    assert settle_range(at(10, 26), WATERMARK, at(10, 0)) == (at(10, 0), at(10, 15))


def test_nothing_before_the_first_span_of_a_date_closes() -> None:
    assert settle_range(at(0, 20), WATERMARK, None) is None
    assert settle_range(at(0, 26), WATERMARK, None) == (DAY, at(0, 15))


def test_a_new_date_starts_from_its_midnight_never_across_two_dates() -> None:
    yesterday_late = DAY - dt.timedelta(minutes=30)
    assert settle_range(at(0, 40), WATERMARK, yesterday_late) == (DAY, at(0, 15))
    # Just after midnight the closed minutes are the previous date's: its own last spans, up to its end at most.
    found = settle_range(at(0, 5), WATERMARK, DAY - dt.timedelta(minutes=45))
    assert found == (DAY - dt.timedelta(minutes=45), DAY - dt.timedelta(minutes=15))
    assert found is not None and found[0].date() == (found[1] - dt.timedelta(microseconds=1)).date()


def test_late_batches_of_older_minutes_settle_nothing_again() -> None:
    assert settle_range(at(9, 0), WATERMARK, at(10, 30)) is None


def test_a_failed_move_is_logged_and_does_not_stop_the_view(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("the Delta log could not be read")

    monkeypatch.setattr(jobs.batch_writers, "straddling_from", broken)
    settings = SimpleNamespace(spark=SimpleNamespace(watermark=WATERMARK))
    # The span is given up (the next span's move takes its rows too): no retry on every batch.
    assert settle(None, settings, at(10, 40), None) == at(10, 15)  # type: ignore[arg-type]


def test_the_newest_minute_is_taken_in_utc(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[dt.datetime] = []
    monkeypatch.setattr(jobs.batch_writers, "straddling_from", lambda *_a, at, **_k: asked.append(at))
    settings = SimpleNamespace(spark=SimpleNamespace(watermark=WATERMARK))
    paris = dt.timezone(dt.timedelta(hours=1))
    newest = (at(10, 40) + dt.timedelta(hours=1)).replace(tzinfo=paris)  # 10:40 UTC
    assert settle(None, settings, newest, None) == at(10, 15)  # type: ignore[arg-type]
    assert asked == [at(10, 15)]
