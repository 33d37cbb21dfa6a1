"""Salt periods: a site's visitor ids last a day, a week or a month, and old salts are deleted on schedule."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import uuid
from pathlib import Path

import pytest

from ingest.beacon import ParsedBody, parse_beacons
from ingest.enrich import RequestFacts
from ingest.pipeline import Pipeline
from ingest.ratelimit import RateLimiter
from ingest.salts import DAY_MS, SaltStore
from tally.salt_periods import period_key, period_of, visitors_meaning
from tally.schema import PageViewEvent
from tally.settings import Settings, SettingsError, SiteSettings
from tests.support.stores import MemoryStore

MONDAY = dt.date(2026, 11, 23)


def ms(day: dt.date, hour: int = 12) -> int:
    return int(dt.datetime.combine(day, dt.time(hour), dt.UTC).timestamp() * 1000)


def test_period_names_sort_in_time_and_name_their_kind() -> None:
    assert period_key(MONDAY, "day") == "2026-11-23"
    assert period_key(MONDAY, "week") == period_key(MONDAY + dt.timedelta(days=6), "week") == "week-2026-W48"
    assert period_key(dt.date(2026, 12, 31), "week") == "week-2026-W53"
    assert period_key(dt.date(2027, 1, 4), "week") == "week-2027-W01" > "week-2026-W53"
    assert period_key(MONDAY, "month") == "month-2026-11"
    assert period_of(dt.date(2026, 2, 10), "month") == (dt.date(2026, 2, 1), dt.date(2026, 2, 28))


def test_a_weekly_salt_is_the_same_all_week_and_deleted_when_the_week_ends(tmp_path: Path) -> None:
    store = SaltStore(tmp_path)
    monday = store.salt_for(ms(MONDAY), "week")
    assert SaltStore(tmp_path).salt_for(ms(MONDAY + dt.timedelta(days=2)), "week") == monday, "Wednesday: same id"
    daily = store.salt_for(ms(MONDAY), "day")
    assert daily != monday
    assert {p.name for p in tmp_path.glob("*.salt")} == {"2026-11-23.salt", "week-2026-W48.salt"}
    next_week = store.salt_for(ms(MONDAY + dt.timedelta(days=7)), "week")
    assert next_week != monday
    names = {p.name for p in tmp_path.glob("*.salt")}
    assert "week-2026-W48.salt" not in names, "last week's salt is gone: ids cannot be linked across weeks"
    assert "2026-11-23.salt" not in names, "that day has ended too"
    store.salt_for(ms(MONDAY + dt.timedelta(days=8)), "day")
    assert {p.name for p in tmp_path.glob("*.salt")} == {"week-2026-W49.salt", "2026-12-01.salt"}


def test_a_monthly_salt_turns_over_on_the_first(tmp_path: Path) -> None:
    store = SaltStore(tmp_path)
    november = store.salt_for(ms(dt.date(2026, 11, 1)), "month")
    assert store.salt_for(ms(dt.date(2026, 11, 30), 23), "month") == november
    assert store.salt_for(ms(dt.date(2026, 12, 1), 0), "month") != november
    assert [p.name for p in tmp_path.glob("month-*.salt")] == ["month-2026-12.salt"]
    assert store.salt_for(ms(dt.date(2026, 12, 1)) + DAY_MS, "month") == store.salt_for(
        ms(dt.date(2026, 12, 1)), "month"
    )


@pytest.mark.parametrize(
    ("period", "start", "end", "words"),
    [
        ("day", MONDAY, MONDAY, "unique visitors"),
        ("day", MONDAY, MONDAY + dt.timedelta(days=2), "came on 3 different days of the range counts 3 times"),
        ("week", MONDAY, MONDAY + dt.timedelta(days=6), "unique visitors"),
        ("week", MONDAY, MONDAY + dt.timedelta(days=7), "3 different weeks"),
        ("month", dt.date(2026, 11, 1), dt.date(2026, 11, 30), "unique visitors"),
    ],
)
def test_what_visitors_means_is_said_in_plain_words(period: str, start: dt.date, end: dt.date, words: str) -> None:
    assert words in visitors_meaning(period, start, end)


def test_an_unknown_salt_period_is_refused_naming_the_site() -> None:
    with pytest.raises(SettingsError, match=r"sites \(a.example\).salt_period: 'year'"):
        SiteSettings("a.example", salt_period="year")


def test_a_visitor_on_monday_and_wednesday_is_one_id_on_a_weekly_site_and_two_on_a_daily_one(tmp_path: Path) -> None:
    weekly, daily = "weekly.example", "daily.example"
    settings = Settings(
        home=str(tmp_path),
        sites=(SiteSettings(weekly, domains=(weekly,), salt_period="week"), SiteSettings(daily, domains=(daily,))),
    )
    store = MemoryStore()
    pipe = Pipeline(settings, store, RateLimiter(site_events_per_second=1000))
    ids: dict[str, list[str]] = {weekly: [], daily: []}
    for day in (MONDAY, MONDAY + dt.timedelta(days=2), MONDAY + dt.timedelta(days=7)):
        at = ms(day)
        for n, site in enumerate((weekly, daily)):
            body = [{"id": str(uuid.uuid4()), "s": site, "u": f"https://{site}/p{n}", "te": at, "ts": at}]
            parsed = parse_beacons(json.dumps(body).encode(), max_batch=50)
            assert isinstance(parsed, ParsedBody)
            outcome = asyncio.run(pipe.accept(parsed, RequestFacts("198.18.0.7", "Mozilla/5.0 Firefox/133.0", at)))
            assert outcome.status == 202, outcome.body
            (_, _, value), *_ = [r for r in store.appends[-1] if r[0] == settings.kafka.pageviews_topic]
            ids[site].append(PageViewEvent.from_json(value).visitor_id)
    monday, wednesday, next_monday = ids[weekly]
    assert monday == wednesday != next_monday, "one id all week, a new one the week after"
    assert len(set(ids[daily])) == 3, "a daily site's ids change every day"
    assert len({ids[weekly][0], ids[daily][0]}) == 2, "ids differ between sites"


def test_a_weeks_salt_is_deleted_when_the_week_ends_even_if_no_site_asks_for_weeks_any_more(tmp_path: Path) -> None:
    store = SaltStore(tmp_path)
    store.salt_for(ms(MONDAY), "week")
    store.salt_for(ms(MONDAY), "month")
    store.salt_for(ms(MONDAY + dt.timedelta(days=7)), "day")  # the site went back to daily ids
    assert not list(tmp_path.glob("week-*.salt")), "last week's salt outlived its week"
    assert [p.name for p in tmp_path.glob("month-*.salt")] == ["month-2026-11.salt"], "November is not over"
    store.salt_for(ms(dt.date(2026, 12, 1)), "day")
    assert not list(tmp_path.glob("month-*.salt"))
