"""Lag that somebody sees: lag as time, one alert line per episode, red on the data-health panel."""

from __future__ import annotations

import datetime as dt
import logging

import pyarrow as pa
import pytest
from confluent_kafka import TopicPartition
from streamlit.testing.v1 import AppTest

import dashboard.health
import query.aggregates
from archiver.lag import LagGauges
from dashboard.health import ArchiveLag
from jobs.late import batch_lag
from query.aggregates import Aggregates
from query.freshness import newest_event
from query.freshness import views_lag as views_behind
from tally.lag import LagAlarm, OffsetClock, describe_lag
from tally.settings import Settings
from tally.storage import append_rows
from tally.table_schemas import RAW_PAGEVIEWS_SCHEMA
from tally.tables import RAW_PAGEVIEWS
from tests.unit.test_trust_dashboard_health import SITE_A, add_users, seed_warehouse, shown, user_page

T0 = dt.datetime(2026, 11, 25, 12, 0, tzinfo=dt.UTC)
P0, P1 = ("pageviews", 0), ("pageviews", 1)


def at(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def test_a_consumer_level_with_the_newest_end_offsets_has_no_lag() -> None:
    clock = OffsetClock()
    clock.record_end(at(0), {P0: 10, P1: 5})
    clock.record_end(at(1), {P0: 20, P1: 5})
    assert clock.lag(at(1.5), {P0: 20, P1: 5}) == dt.timedelta(0)


def test_the_lag_is_how_long_ago_the_log_first_held_what_the_consumer_still_lacks() -> None:
    clock = OffsetClock()
    for minute, end in enumerate((10, 20, 30, 40)):
        clock.record_end(at(minute), {P0: end, P1: 7})
    # Offsets up to 20 are done: everything Kafka held at minute 1, not what it held at minute 2.
    assert clock.lag(at(5), {P0: 20, P1: 7}) == dt.timedelta(minutes=3)
    assert clock.lag(at(5), {P0: 40}) == dt.timedelta(minutes=5), "a partition not processed at all lags"


def test_no_sample_means_the_lag_is_unknown_and_old_samples_are_dropped_past_the_horizon() -> None:
    clock = OffsetClock(horizon=dt.timedelta(minutes=10))
    assert clock.lag(at(0), {P0: 0}) is None
    for minute in range(0, 60, 5):
        clock.record_end(at(minute), {P0: minute + 1})
    assert clock.lag(at(55), {P0: 0}) == dt.timedelta(minutes=10), "at least the horizon, never more"


def test_the_alarm_logs_once_when_the_lag_passes_the_limit_and_once_when_it_is_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    alarm = LagAlarm("archive", dt.timedelta(minutes=10), logging.getLogger("tally.test"))
    with caplog.at_level(logging.INFO, logger="tally.test"):
        states = [alarm.observe(dt.timedelta(minutes=m)) for m in (1, 9, 11, 14, 20)]
        assert alarm.observe(None) is True, "an unknown lag changes nothing"
        states.append(alarm.observe(dt.timedelta(0)))
    assert states == [False, False, True, True, True, False]
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["alert: archive lag over the limit", "alert over: archive lag back under the limit"]
    assert caplog.records[0].levelno == logging.WARNING


def test_a_views_batch_lag_runs_from_the_previous_batch_start_to_its_own_end() -> None:
    minute = dt.timedelta(minutes=1)
    assert batch_lag(at(0), at(2), 3 * minute, rows=100) == 5 * minute
    assert batch_lag(at(0), at(2), 3 * minute, rows=0) == dt.timedelta(0), "nothing read, nothing waited"
    assert batch_lag(None, at(2), minute, rows=1) == minute, "the first batch: its own duration"


class FakeConsumer:
    """Assigned partitions and the high watermarks the consumer last fetched."""

    def __init__(self, highs: dict[tuple[str, int], int]) -> None:
        self.highs = highs

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in self.highs]

    def get_watermark_offsets(self, tp: TopicPartition, cached: bool = False) -> tuple[int, int]:
        return 0, self.highs[(tp.topic, tp.partition)]


class FakeTable:
    def __init__(self, done: dict[tuple[str, int], int]) -> None:
        self.done = done

    def next_offset(self, topic: str, partition: int) -> int | None:
        return self.done.get((topic, partition))


def test_an_archiver_that_falls_ever_further_behind_logs_one_lag_alert(caplog: pytest.LogCaptureFixture) -> None:
    now = [at(0)]
    table = FakeTable({P0: 0})
    gauges = LagGauges({"raw.pageviews": table}, alert_after=dt.timedelta(minutes=10), clock=lambda: now[0])
    consumer = FakeConsumer({P0: 0})
    with caplog.at_level(logging.INFO, logger="tally.archiver"):
        for minute in range(0, 26):  # Kafka grows 100 a minute, the archiver 50: at minute m it lags m/2
            now[0], consumer.highs[P0], table.done[P0] = at(minute), 100 * minute, 50 * minute
            gauges.export(consumer)  # type: ignore[arg-type]
    alerts = [r for r in caplog.records if r.getMessage().startswith("alert:")]
    assert len(alerts) == 1 and gauges.alarm.alerting
    assert alerts[0].fields["setting"] == "alerts.lag_minutes"  # type: ignore[attr-defined]
    for minute in range(26, 28):  # it catches up
        now[0], consumer.highs[P0], table.done[P0] = at(minute), 3000, 3000
        gauges.export(consumer)  # type: ignore[arg-type]
    assert not gauges.alarm.alerting


def test_views_behind_measures_the_newest_minute_against_the_newest_archived_event() -> None:
    today = T0.date()
    assert views_behind(None, None, today) == dt.timedelta(0)
    assert views_behind(at(30), at(31), today) == dt.timedelta(0)
    assert views_behind(at(30), at(10), today) == dt.timedelta(minutes=20)
    midnight_yesterday = dt.datetime.combine(today - dt.timedelta(days=1), dt.time(), dt.UTC)
    assert views_behind(at(0), None, today) == at(0) - midnight_yesterday
    assert describe_lag(dt.timedelta(minutes=125)) == "2 h 5 min" and describe_lag(dt.timedelta(seconds=9)) == "9 s"


@pytest.fixture(autouse=True)
def seeded(settings: Settings) -> None:
    """Each test's home with the warehouse and the users below."""
    seed_warehouse(settings)
    add_users(settings)


def archive_lag_of(oldest_minutes: float) -> ArchiveLag:
    return ArchiveLag(5000, dt.datetime.now(dt.UTC) - dt.timedelta(minutes=oldest_minutes))


def test_an_archive_lag_older_than_the_limit_is_an_alert_on_the_panel(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dashboard.health, "archive_lag_total", lambda settings, **_: archive_lag_of(25.5))
    app: AppTest = user_page(settings, "root", monkeypatch)
    assert not app.exception
    errors = [e.value for e in app.error]
    assert any("oldest message not yet archived has waited 25 min" in e for e in errors), errors
    assert "5,000, oldest 25 min" in shown(app)


def test_a_young_archive_lag_is_no_alert(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dashboard.health, "archive_lag_total", lambda settings, **_: archive_lag_of(2))
    app = user_page(settings, "root", monkeypatch)
    assert not app.exception and not app.error


def test_views_far_behind_the_archived_events_are_an_alert_for_the_sites_own_viewers(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dashboard.health, "archive_lag_total", lambda settings, **_: ArchiveLag(0))
    now = dt.datetime.now(dt.UTC)
    event = {
        "event_id": "e1",
        "site_id": SITE_A,
        "event_time": int((now - dt.timedelta(minutes=1)).timestamp() * 1000),
        "event_date": now.date(),
        "is_bot": False,
    }
    append_rows(settings, RAW_PAGEVIEWS, pa.Table.from_pylist([event], schema=RAW_PAGEVIEWS_SCHEMA))
    app = user_page(settings, "ana", monkeypatch)  # one site only: the views alert is about that site
    errors = [e.value for e in app.error]
    assert any("the views are" in e and "behind the archived events of this site" in e for e in errors), errors


def test_the_newest_event_is_a_sites_own_non_bot_one_read_from_the_readers_kept_snapshot(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    def event(event_id: str, site: str, minutes: float, *, bot: bool = False) -> dict[str, object]:
        at_ms = int(at(minutes).timestamp() * 1000)
        return {"event_id": event_id, "site_id": site, "event_time": at_ms, "event_date": T0.date(), "is_bot": bot}

    rows = [event("own", SITE_A, -5), event("crawler", SITE_A, -1, bot=True), event("other", "b.example", -2)]
    append_rows(settings, RAW_PAGEVIEWS, pa.Table.from_pylist(rows, schema=RAW_PAGEVIEWS_SCHEMA))
    agg = Aggregates(settings)
    assert agg.dataset(RAW_PAGEVIEWS) is not None  # the reader's snapshot, as the dashboard's warm-up opens it
    monkeypatch.setattr(query.aggregates, "REFRESH_SECONDS", 3600.0)

    def reopened(*args: object) -> None:
        raise AssertionError("the newest event opened raw.pageviews again")

    monkeypatch.setattr(query.aggregates, "open_table", reopened)
    assert newest_event(agg, SITE_A, T0.date()) == at(-5)
    assert newest_event(agg, "nobody.example", T0.date()) is None
