"""A site's local days as UTC instants, and the view rows that make them up (query/site_time.py)."""

from __future__ import annotations

import datetime as dt
import itertools

import pytest

from notify.digest import Digest, Figures
from notify.health import Health
from notify.messages import report_message
from notify.periods import due_period
from query.aggregates import AggregateReport, Range
from query.plausible import parse_query, parse_site_query
from query.site_time import LocalDays, Pieces, bucket, buckets, is_utc, local_today, series_pieces, split
from query.sources import Sources
from query.vitals import AggregateVitals
from query.zoned import ZonedReport, ZonedVitals
from tally.settings import Settings, SiteSettings

NEW_YORK, KOLKATA, KATHMANDU = "America/New_York", "Asia/Kolkata", "Asia/Kathmandu"
SPRING, FALL = dt.date(2026, 3, 8), dt.date(2026, 11, 1)  # New York's 2026 DST start and end


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> dt.datetime:
    return dt.datetime(year, month, day, hour, minute, tzinfo=dt.UTC)


def hours(interval: tuple[dt.datetime, dt.datetime]) -> float:
    return (interval[1] - interval[0]) / dt.timedelta(hours=1)


def test_a_kolkata_day_begins_at_half_past_six_the_evening_before_in_utc() -> None:
    day = LocalDays(dt.date(2026, 3, 8), dt.date(2026, 3, 8), KOLKATA)
    assert day.instants == (utc(2026, 3, 7, 18, 30), utc(2026, 3, 8, 18, 30))
    assert not day.hour_aligned and day.utc_dates == (dt.date(2026, 3, 7), dt.date(2026, 3, 8))


def test_a_kathmandu_day_begins_at_a_quarter_past_six_the_evening_before_in_utc() -> None:
    day = LocalDays(dt.date(2026, 3, 8), dt.date(2026, 3, 8), KATHMANDU)
    assert day.instants == (utc(2026, 3, 7, 18, 15), utc(2026, 3, 8, 18, 15))
    assert not day.hour_aligned


def test_new_yorks_day_of_dst_start_has_23_hours_and_of_dst_end_25() -> None:
    before, spring, fall = (LocalDays(d, d, NEW_YORK) for d in (SPRING - dt.timedelta(days=1), SPRING, FALL))
    assert before.instants == (utc(2026, 3, 7, 5), utc(2026, 3, 8, 5))
    assert spring.instants == (utc(2026, 3, 8, 5), utc(2026, 3, 9, 4)) and hours(spring.instants) == 23
    assert fall.instants == (utc(2026, 11, 1, 4), utc(2026, 11, 2, 5)) and hours(fall.instants) == 25
    assert spring.hour_aligned and fall.hour_aligned


def test_a_week_across_the_dst_start_is_seven_days_less_one_hour() -> None:
    week = LocalDays(dt.date(2026, 3, 5), dt.date(2026, 3, 11), NEW_YORK)
    assert week.instants == (utc(2026, 3, 5, 5), utc(2026, 3, 12, 4)) and hours(week.instants) == 7 * 24 - 1
    assert week.utc_dates == (dt.date(2026, 3, 5), dt.date(2026, 3, 12))


def test_a_new_york_range_is_whole_utc_days_inside_and_hours_at_its_edges() -> None:
    pieces = split(LocalDays(dt.date(2026, 3, 7), dt.date(2026, 3, 9), NEW_YORK).instants)
    assert pieces == Pieces(
        days=(dt.date(2026, 3, 8), dt.date(2026, 3, 9)),
        hours=((utc(2026, 3, 7, 5), utc(2026, 3, 8)), (utc(2026, 3, 10), utc(2026, 3, 10, 4))),
        minutes=(),
    )


def test_a_kolkata_range_adds_the_minutes_of_its_half_hours_at_both_edges() -> None:
    pieces = split(LocalDays(dt.date(2026, 3, 8), dt.date(2026, 3, 8), KOLKATA).instants)
    assert pieces.days is None
    assert pieces.hours == ((utc(2026, 3, 7, 19), utc(2026, 3, 8, 18)),)
    assert pieces.minutes == (
        (utc(2026, 3, 7, 18, 30), utc(2026, 3, 7, 19)),
        (utc(2026, 3, 8, 18), utc(2026, 3, 8, 18, 30)),
    )


def test_pieces_cover_the_range_exactly_once() -> None:
    for zone in (NEW_YORK, KOLKATA, KATHMANDU, "UTC"):
        days = LocalDays(dt.date(2026, 2, 27), dt.date(2026, 3, 10), zone)
        pieces = split(days.instants)
        spans = [*pieces.hours, *pieces.minutes]
        if pieces.days:
            spans.append(
                (utc(*pieces.days[0].timetuple()[:3]), utc(*pieces.days[1].timetuple()[:3]) + dt.timedelta(days=1))
            )
        spans.sort()
        assert spans[0][0] == days.instants[0] and spans[-1][1] == days.instants[1], zone
        assert all(a[1] == b[0] for a, b in itertools.pairwise(spans)), zone


def test_a_daily_series_in_kolkata_reads_the_hours_its_day_edges_cut_as_minutes() -> None:
    pieces = series_pieces(LocalDays(dt.date(2026, 3, 8), dt.date(2026, 3, 9), KOLKATA), "day")
    assert pieces.days is None
    assert (utc(2026, 3, 8, 18), utc(2026, 3, 8, 19)) in pieces.minutes
    assert all(not (a <= utc(2026, 3, 8, 18, 30) < b) for a, b in pieces.hours)


def test_an_hourly_series_in_kolkata_is_read_from_minutes_since_every_local_hour_starts_at_half_past() -> None:
    pieces = series_pieces(LocalDays(dt.date(2026, 3, 8), dt.date(2026, 3, 8), KOLKATA), "hour")
    assert pieces.hours == () and sum(hours(m) for m in pieces.minutes) == 24


def test_the_day_clocks_go_forward_has_23_local_hours_and_the_day_they_go_back_24_buckets() -> None:
    spring = buckets(LocalDays(SPRING, SPRING, NEW_YORK), "hour")
    fall = buckets(LocalDays(FALL, FALL, NEW_YORK), "hour")
    assert len(spring) == 23 and dt.datetime(2026, 3, 8, 2) not in spring
    assert len(fall) == 24 and fall.count(dt.datetime(2026, 11, 1, 1)) == 1
    assert bucket(utc(2026, 11, 1, 5, 30), "hour", NEW_YORK) == bucket(utc(2026, 11, 1, 6, 30), "hour", NEW_YORK)
    assert bucket(utc(2026, 3, 8, 18, 29), "day", KOLKATA) == dt.datetime(2026, 3, 8)
    assert bucket(utc(2026, 3, 8, 18, 30), "day", KOLKATA) == dt.datetime(2026, 3, 9)


def test_today_is_the_sites_local_date() -> None:
    now = utc(2026, 3, 8, 19)
    assert local_today(KOLKATA, now) == dt.date(2026, 3, 9)
    assert local_today(NEW_YORK, now) == dt.date(2026, 3, 8)
    assert local_today("UTC", utc(2026, 3, 9, 3)) == dt.date(2026, 3, 9)
    assert local_today(NEW_YORK, utc(2026, 3, 9, 3)) == dt.date(2026, 3, 8)


@pytest.mark.parametrize("name", ["UTC", "Etc/UTC", "Etc/GMT"])
def test_utc_by_any_name_keeps_the_views_own_days(name: str) -> None:
    assert is_utc(name) and not is_utc("Europe/London")


def test_an_api_query_reads_its_range_in_the_sites_zone() -> None:
    now = utc(2026, 3, 8, 19)  # already 9 March in Kolkata
    body = {"site_id": "k", "date_range": "day", "metrics": ["pageviews"]}
    query = parse_site_query(body, now=now, timezone_of=lambda site: KOLKATA)
    assert (query.start, query.end, query.timezone) == (dt.date(2026, 3, 9), dt.date(2026, 3, 9), KOLKATA)
    assert query.utc_interval() == (utc(2026, 3, 8, 18, 30), utc(2026, 3, 9, 18, 30))
    assert query.utc_dates() == (dt.date(2026, 3, 8), dt.date(2026, 3, 9))
    week = parse_site_query({**body, "date_range": "7d"}, now=now, timezone_of=lambda site: NEW_YORK)
    assert (week.start, week.end) == (dt.date(2026, 3, 2), dt.date(2026, 3, 8))


def test_a_utc_sites_query_keeps_whole_utc_days() -> None:
    query = parse_query(
        {"site_id": "u", "date_range": ["2026-03-01", "2026-03-02"], "metrics": ["visits"]}, today=SPRING
    )
    assert query.utc_interval() is None and query.utc_dates() == (dt.date(2026, 3, 1), dt.date(2026, 3, 2))


def test_a_date_time_without_an_offset_is_the_sites_wall_clock() -> None:
    body = {"site_id": "n", "date_range": ["2026-03-08 00:00:00", "2026-03-08 23:59:59"], "metrics": ["pageviews"]}
    query = parse_query(body, today=SPRING, timezone=NEW_YORK)
    assert query.between == (utc(2026, 3, 8, 5), utc(2026, 3, 9, 4))
    assert (query.start, query.end) == (SPRING, SPRING)


def test_a_utc_site_keeps_the_views_own_days_and_a_zoned_site_gets_its_local_days() -> None:
    settings = Settings(
        sites=(
            SiteSettings("utc.test"),
            SiteSettings("ny.test", timezone=NEW_YORK),
            SiteSettings("k.test", timezone=KOLKATA),
        )
    )
    sources = Sources(settings)
    day = dt.date(2026, 3, 8)
    assert type(sources.aggregate_report("utc.test", day, day)) is AggregateReport
    zoned = sources.aggregate_report("ny.test", day, day)
    assert isinstance(zoned, ZonedReport) and zoned.days == LocalDays(day, day, NEW_YORK)
    assert type(sources.aggregate_vitals("utc.test", day, day)) is AggregateVitals
    assert type(sources.aggregate_vitals("ny.test", day, day)) is ZonedVitals  # whole UTC hours: the view
    assert sources.timezone("k.test") == KOLKATA and sources.timezone("unknown.test") == "UTC"


def test_a_scheduled_report_is_of_the_sites_local_week_and_says_its_zone() -> None:
    settings = Settings(sites=(SiteSettings("k.test", timezone=KOLKATA),))
    # Sunday 8 March 2026, 19:00 UTC is already Monday in Kolkata: its week of 2-8 March is complete there.
    now = utc(2026, 3, 8, 19)
    today = local_today(Sources(settings).timezone("k.test"), now)
    assert due_period("weekly", today) == Range(dt.date(2026, 3, 2), dt.date(2026, 3, 8))
    assert due_period("weekly", now.date()) == Range(dt.date(2026, 2, 23), dt.date(2026, 3, 1))  # UTC's
    health = Health(dt.timedelta(0), dt.timedelta(0), (), dt.timedelta(minutes=10))
    figures = Figures(1.0, 0.0, 1, 1, 0.0, 1.0)
    report = Digest(
        "k.test", "weekly", Range(SPRING, SPRING), Range(SPRING, SPRING), figures, figures, (), (), health, KOLKATA
    )
    assert "(Asia/Kolkata, bots excluded)" in report_message(report).text.splitlines()[0]
