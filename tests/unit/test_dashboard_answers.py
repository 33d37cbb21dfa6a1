"""The dashboard's answers are computed side by side and kept only while the tables they come from are unchanged."""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import write_deltalake

import dashboard.page
import query.aggregates
from dashboard.answers import (
    AGGREGATE_TABLES,
    EVERY_TABLE,
    AnswerCache,
    AnsweredReport,
    Asker,
    answer_key,
    filters_key,
    tables_read,
)
from query.aggregates import AggregateReport, Aggregates, Range
from query.raw import RawQuery
from query.sources import NO_SITE, Sources
from query.vitals import AggregateVitals, ExactVitals
from query.zoned import ZonedReport
from tally.settings import Settings, SiteSettings, load_settings
from tally.site_registry import SITE_ID_FORMAT
from tally.tables import RAW_PAGEVIEWS


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=2) as threads:
        yield threads


class CountingReport:
    """A report that counts how often each question is computed."""

    exact = False

    def __init__(self) -> None:
        self.asked: list[tuple[object, ...]] = []

    def top(self, dimension: str, limit: int = 10) -> pd.DataFrame:
        self.asked.append(("top", dimension, limit))
        return pd.DataFrame({"value": [dimension], "pageviews": [limit]})

    def top_visits(self, dimension: str, limit: int = 10) -> pd.DataFrame:
        self.asked.append(("top_visits", dimension, limit))
        return pd.DataFrame({"value": [dimension], "visits": [limit]})


def answered(report: CountingReport, cache: AnswerCache, pool: ThreadPoolExecutor, version: int) -> AnsweredReport:
    return AnsweredReport(
        report, source=("views", "a.test"), versions=(("agg.traffic_1d", version),), cache=cache, pool=pool
    )


def test_the_same_question_over_the_same_table_versions_is_computed_once(pool: ThreadPoolExecutor) -> None:
    cache, report = AnswerCache(), CountingReport()
    first = answered(report, cache, pool, version=3).top("page")
    again = answered(report, cache, pool, version=3).top("page")
    assert report.asked == [("top", "page", 10)]
    assert first.equals(again)


def test_a_new_table_version_is_a_new_key_so_new_data_is_computed(pool: ThreadPoolExecutor) -> None:
    cache, report = AnswerCache(), CountingReport()
    answered(report, cache, pool, version=3).top("page")
    answered(report, cache, pool, version=4).top("page")
    assert report.asked == [("top", "page", 10), ("top", "page", 10)]


def test_other_arguments_are_other_questions(pool: ThreadPoolExecutor) -> None:
    cache, report = AnswerCache(), CountingReport()
    answers = answered(report, cache, pool, version=1)
    answers.top("page")
    answers.top("page", 50)
    answers.top("country", 50)
    assert len(report.asked) == 3


def test_a_kept_data_frame_is_handed_out_as_a_copy_a_panel_may_change(pool: ThreadPoolExecutor) -> None:
    cache, report = AnswerCache(), CountingReport()
    answered(report, cache, pool, version=1).top("page")["pageviews"] = 0
    assert answered(report, cache, pool, version=1).top("page")["pageviews"].tolist() == [10]


def test_a_question_asked_twice_while_it_is_computed_is_computed_once(pool: ThreadPoolExecutor) -> None:
    cache, release, computed = AnswerCache(), threading.Event(), []

    def slow() -> int:
        computed.append(1)
        release.wait(5)
        return 42

    first = cache.answer("k", slow, pool)
    second = cache.answer("k", slow, pool)
    release.set()
    assert first.result() == second.result() == 42 and computed == [1]


def test_a_failed_answer_is_not_kept(pool: ThreadPoolExecutor) -> None:
    cache, calls = AnswerCache(), []

    def failing() -> int:
        calls.append(1)
        raise OSError("the table could not be read")

    with pytest.raises(OSError):
        cache.answer("k", failing, pool).result()
    assert cache.answer("k", lambda: 7, pool).result() == 7 and calls == [1]


def test_the_cache_keeps_the_newest_answers_only(pool: ThreadPoolExecutor) -> None:
    cache = AnswerCache(max_entries=2)
    for key in ("a", "b", "c"):
        cache.answer(key, lambda: 1, pool).result()
    assert len(cache) == 2
    assert cache.answer("a", lambda: 2, pool).result() == 2, "the oldest answer was dropped"


def test_keys_name_the_question_the_report_and_the_versions() -> None:
    key = answer_key(
        ("raw", "a.test", filters_key({"page": "/", "country": "DE"})), (("raw.pageviews", 5),), "top", "os", 10
    )
    same = answer_key(
        ("raw", "a.test", filters_key({"country": "DE", "page": "/"})), (("raw.pageviews", 5),), "top", "os", 10
    )
    assert key == same and hash(key) == hash(same), "filters in another order are the same filters"
    assert key != answer_key(
        ("raw", "a.test", filters_key({"country": "DE"})), (("raw.pageviews", 5),), "top", "os", 10
    )


def test_each_report_is_keyed_on_the_tables_it_reads(tmp_path: Path) -> None:
    agg = Aggregates(load_settings())
    days = Range(dt.date(2026, 1, 1), dt.date(2026, 1, 7))
    assert tables_read(AggregateReport(agg, "a.test", days)) == AGGREGATE_TABLES
    assert tables_read(AggregateVitals(agg, "a.test", days)) == ("agg.vitals_1h",)
    assert tables_read(RawQuery(None, "a.test", days, {}, 1800_000)) == ("raw.pageviews",)  # type: ignore[arg-type]
    zoned = ZonedReport.__new__(ZonedReport)  # a site's local days: put together from every view
    assert tables_read(zoned) == EVERY_TABLE


def test_a_views_reports_visit_figures_are_kept_under_the_open_visits_tables_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pool: ThreadPoolExecutor
) -> None:
    settings = home_settings(tmp_path, monkeypatch)
    monkeypatch.setattr(query.aggregates, "REFRESH_SECONDS", 0.0)
    raw = settings.table_uri("raw.pageviews")
    write_deltalake(raw, pa.table({"n": [1]}))
    report = CountingReport()
    ask = Asker(Aggregates(settings), AnswerCache(), pool)
    dummy = AggregateReport(ask.agg, "a.test", Range(dt.date(2026, 1, 1), dt.date(2026, 1, 7)))
    answered = ask.report(dummy, ("views", "a.test"))
    answered.report = report  # the views report's keys, the counting report's answers
    answered.top("page")
    answered.top_visits("entry_page")
    write_deltalake(raw, pa.table({"n": [2]}), mode="append")  # a new event archived: maybe a visit opened
    again = ask.report(dummy, ("views", "a.test"))
    again.report = report
    again.top("page")
    again.top_visits("entry_page")
    assert report.asked == [("top", "page", 10), ("top_visits", "entry_page", 10), ("top_visits", "entry_page", 10)], (
        "the traffic table is kept over the new raw version; the visits are counted again"
    )


def home_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Settings with a home and a warehouse of this test's own."""
    monkeypatch.setenv("TALLY_HOME", str(tmp_path))
    monkeypatch.setenv("TALLY_WAREHOUSE__PATH", str(tmp_path / "warehouse"))
    return load_settings()


def test_the_asker_keys_answers_on_the_snapshot_versions_and_sees_a_new_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pool: ThreadPoolExecutor
) -> None:
    settings = home_settings(tmp_path, monkeypatch)
    uri = settings.table_uri("agg.traffic_1d")
    write_deltalake(uri, pa.table({"n": [1]}))
    ask = Asker(Aggregates(settings), AnswerCache(), pool)
    assert ask.versions(("agg.traffic_1d", "agg.missing")) == (("agg.traffic_1d", 0), ("agg.missing", None))
    write_deltalake(uri, pa.table({"n": [2]}), mode="append")
    assert ask.versions(("agg.traffic_1d",)) == (("agg.traffic_1d", 0),), "a snapshot is kept a few seconds"
    monkeypatch.setattr(query.aggregates, "REFRESH_SECONDS", 0.0)
    assert ask.versions(("agg.traffic_1d",)) == (("agg.traffic_1d", 1),), "then the new version is read"
    computed: list[int] = []
    for _ in range(2):
        ask.value(("rows",), ("agg.traffic_1d",), lambda: computed.append(1)).result()
    write_deltalake(uri, pa.table({"n": [3]}), mode="append")
    ask.value(("rows",), ("agg.traffic_1d",), lambda: computed.append(1)).result()
    assert computed == [1, 1], "computed once for version 1, again for version 2"


def test_the_warm_up_opens_the_page_tables_in_the_reader_every_page_run_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = home_settings(tmp_path, monkeypatch)
    written = next(name for name in dashboard.page.PAGE_TABLES if name in query.aggregates.IN_MEMORY)
    write_deltalake(settings.table_uri(written), pa.table({"site_id": ["a"]}))
    dashboard.page.warm_up()  # the other tables are not written yet: skipped, no error
    # A page run's settings carry the sites of the moment (sites added at runtime): the same reader.
    page_settings = dataclasses.replace(settings, sites=())
    reader = dashboard.page.aggregates(page_settings)
    assert set(reader._tables) == {written}, "the warm-up opened what exists, in the page's own reader"
    assert written in query.aggregates.IN_MEMORY and set(reader._memory) == {written}, "a small table: read whole"
    assert {"raw.pageviews", "agg.sessions", "agg.active_5m", "quality.results", "quality.partitions"} <= set(
        dashboard.page.PAGE_TABLES
    ), "besides the answers' tables: the realtime figure's, the data-health panel's and the quarantine list's"
    assert dashboard.page.aggregates(settings) is reader
    monkeypatch.setenv("TALLY_HOME", str(tmp_path / "another-home"))  # its own warehouse: its own reader
    monkeypatch.delenv("TALLY_WAREHOUSE__PATH")
    assert dashboard.page.aggregates(load_settings()) is not reader


def test_a_table_failing_its_warm_up_is_logged_and_the_others_are_still_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("TALLY_HOME", str(tmp_path))
    monkeypatch.setenv("TALLY_WAREHOUSE__PATH", str(tmp_path / "other-warehouse"))
    failing = dashboard.page.PAGE_TABLES[0]
    real_snapshot = Aggregates.snapshot
    tried: list[str] = []

    def broken_first(self: Aggregates, name: str) -> Any:
        tried.append(name)
        if name == failing:
            raise OSError("the disk is gone")
        return real_snapshot(self, name)

    monkeypatch.setattr(Aggregates, "snapshot", broken_first)
    dashboard.page.warm_up()
    assert "warming up a table failed" in caplog.text
    assert failing in [getattr(r, "fields", {}).get("table") for r in caplog.records]
    assert tried == list(dashboard.page.PAGE_TABLES), "the tables after the failing one were still opened"


def test_a_recent_figure_is_read_once_per_tick_and_anew_after_it(
    pool: ThreadPoolExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka's archive lag (no table version to key it on) is kept for page runs within its tick."""
    clock = [100.0]
    monkeypatch.setattr("dashboard.answers.time.monotonic", lambda: clock[0])
    ask = Asker(Aggregates(load_settings()), AnswerCache(), pool)
    reads: list[int] = []

    def lag() -> int:
        reads.append(1)
        return len(reads)

    assert ask.recent(("archive_lag",), 5.0, lag).result() == 1
    clock[0] = 104.9  # the same 5-second tick: the kept figure
    assert ask.recent(("archive_lag",), 5.0, lag).result() == 1
    clock[0] = 105.0  # the next tick: read anew
    assert ask.recent(("archive_lag",), 5.0, lag).result() == 2
    assert ask.recent(("other",), 5.0, lag).result() == 3  # another figure has its own key


def test_a_drill_down_reads_the_raw_snapshot_its_answers_are_keyed_on_without_reopening_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pool: ThreadPoolExecutor
) -> None:
    settings = home_settings(tmp_path, monkeypatch)
    # A site whose days begin on the half hour: even its unfiltered vitals are read from raw events.
    settings = dataclasses.replace(settings, sites=(SiteSettings(site_id="in.example", timezone="Asia/Kolkata"),))
    monkeypatch.setattr(query.aggregates, "REFRESH_SECONDS", 3600.0)  # the reader keeps its snapshot here
    uri = settings.table_uri(RAW_PAGEVIEWS)
    write_deltalake(uri, pa.table({"site_id": ["a"]}))
    sources = Sources(settings)
    version = sources.aggregates.version(RAW_PAGEVIEWS)  # what the page's answers are keyed on
    write_deltalake(uri, pa.table({"site_id": ["a"]}), mode="append")  # newer, not yet seen by the reader

    def reopened(*args: object) -> None:
        raise AssertionError("the dashboard read the table's log and listed its files again")

    monkeypatch.setattr("query.sources.find_table", reopened)
    day = dt.date(2026, 1, 5)
    drill_down = sources.raw("a", Range(day, day), {"country": "DE"})
    filtered_vitals = sources.vitals("a", day, day, {"country": "DE"})
    zoned_vitals = sources.vitals("in.example", day, day, {})
    assert isinstance(drill_down, RawQuery)
    assert isinstance(filtered_vitals, ExactVitals) and isinstance(zoned_vitals, ExactVitals)
    reports: tuple[RawQuery | ExactVitals, ...] = (drill_down, filtered_vitals, zoned_vitals)
    assert {r.snapshot for r in reports} == {(uri, version)}, "the version the answers are keyed on"
    assert all(r.raw is sources.aggregates.dataset(RAW_PAGEVIEWS) for r in reports)

    # Once the reader has loaded the newer version, a report made before it is still kept under the
    # version it reads: its answers never stand for data they do not hold.
    monkeypatch.setattr(query.aggregates, "REFRESH_SECONDS", 0.0)
    ask = Asker(sources.aggregates, AnswerCache(), pool)
    assert version is not None and ask.versions((RAW_PAGEVIEWS,)) == ((RAW_PAGEVIEWS, version + 1),)
    assert ask.versions_of(drill_down) == ask.versions_of(filtered_vitals) == ((RAW_PAGEVIEWS, version),)


def test_a_filtered_question_before_any_raw_event_is_answered_for_no_site_with_empty_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = home_settings(tmp_path, monkeypatch)
    settings = dataclasses.replace(settings, sites=(SiteSettings(site_id="in.example", timezone="Asia/Kolkata"),))
    sources = Sources(settings)
    day = dt.date(2026, 1, 5)
    report = sources.report("in.example", day, day, {"country": "DE"})
    vitals = (sources.vitals("in.example", day, day, {"country": "DE"}), sources.vitals("in.example", day, day, {}))
    assert not SITE_ID_FORMAT.fullmatch(NO_SITE), "no site can have it"
    assert isinstance(report, AggregateReport) and report.site_id == NO_SITE
    assert all(isinstance(v, AggregateVitals) and v.site_id == NO_SITE for v in vitals)
    assert report.totals().pageviews == 0 and all(v.vitals("all") == [] for v in vitals)
