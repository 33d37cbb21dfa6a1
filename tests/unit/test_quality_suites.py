"""The GX suites build against the pinned Great Expectations, pass well-formed partitions, and name what breaks."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator

import great_expectations as gx
import pandas as pd
import pytest

from quality.contracts import (
    CHECKED_TABLES,
    FORMULA_PREFIXES,
    MAX_EVENT_NAME,
    MAX_PROP_KEY,
    MAX_PROP_VALUE,
    Contract,
    contracts,
)
from quality.suites import SuiteRunner, build_freshness_suite, build_suite, schema_result
from tally.settings import QualitySettings

DAY = dt.date(2026, 1, 10)
NOW = dt.datetime(2026, 1, 12, 9, 0, tzinfo=dt.UTC)
QUALITY = QualitySettings()
CONTRACTS = contracts(QUALITY)


@pytest.fixture(scope="module")
def runner() -> Iterator[SuiteRunner]:
    yield SuiteRunner(QUALITY)


def test_the_pinned_great_expectations_version_is_the_one_the_suites_are_written_for() -> None:
    assert gx.__version__ == "1.24.1"


@pytest.mark.parametrize("table", CHECKED_TABLES)
def test_every_suite_builds_against_the_installed_great_expectations(runner: SuiteRunner, table: str) -> None:
    # GX wants an active data context to add expectations; the runner's ephemeral one is it.
    contract = CONTRACTS[table]
    suite = build_suite(contract)
    assert suite.name == table
    names = [(e.meta or {}).get("check") for e in suite.expectations]
    assert len(names) == len(set(names)), "each check has its own readable name"
    assert "columns" in names and f"{', '.join(contract.keys)} unique" in names
    freshness = build_freshness_suite(contract)
    assert (freshness is None) == (contract.freshness is None)


def _value(contract: Contract, column: str, kind: str, row: int, day: dt.date) -> object:
    """A value that satisfies the contract, for a well-formed partition."""
    start = dt.datetime.combine(day, dt.time(12), dt.UTC) + dt.timedelta(minutes=row)
    if column in contract.in_sets:
        return contract.in_sets[column][0]
    if kind == "timestamp":
        return start
    if kind == "date":
        return day
    if kind == "boolean":
        return False
    if kind == "binary":
        return b"\x01"
    if kind == "map<string,string>":
        return []
    if kind in ("long", "integer"):
        if contract.day_column == (column, "ms") or (column, "ms") in contract.sane_times:
            return int(start.timestamp() * 1000)
        return 1
    if kind == "double":
        return 0.05
    return f"{column}-{row}"


def well_formed(contract: Contract, day: dt.date = DAY, rows: int = 3) -> pd.DataFrame:
    frame = pd.DataFrame(
        {c: [_value(contract, c, kind, i, day) for i in range(rows)] for c, kind in contract.columns.items()}
    )
    for difference in contract.differences:  # later - earlier: the smallest difference the contract allows
        smallest = max(next((r.minimum or 0 for r in contract.ranges if r.column == difference.name), 0), 0)
        timestamps = contract.columns[difference.earlier] == "timestamp"
        frame[difference.later] = frame[difference.earlier] + (
            dt.timedelta(seconds=smallest) if timestamps else smallest
        )
    derived = {total.name: total.parts for total in contract.totals}
    for a, b in contract.at_least:  # a >= a derived total: a is the total (every band of a vital counted)
        if b in derived:
            frame[a] = sum(frame[part] for part in derived[b])
    for column, kind in contract.columns.items():
        if kind == "timestamp":
            frame[column] = pd.to_datetime(frame[column], utc=True).dt.as_unit("us")
    return frame


def _failed(runner: SuiteRunner, table: str, frame: pd.DataFrame, day: dt.date = DAY) -> list[str]:
    return [r.check for r in runner.validate(CONTRACTS[table], day, frame, now=NOW) if not r.success]


@pytest.mark.parametrize("table", CHECKED_TABLES)
def test_a_well_formed_partition_passes_every_check(runner: SuiteRunner, table: str) -> None:
    assert _failed(runner, table, well_formed(CONTRACTS[table])) == []


def test_an_empty_partition_of_a_past_day_passes(runner: SuiteRunner) -> None:
    assert _failed(runner, "agg.traffic_1m", well_formed(CONTRACTS["agg.traffic_1m"]).iloc[:0]) == []


Mutation = Callable[[pd.DataFrame], None]


def _set(column: str, value: object, row: int = 1) -> Mutation:
    def mutate(frame: pd.DataFrame) -> None:
        frame[column] = frame[column].astype(object)
        frame.at[row, column] = value

    return mutate


def _shift(column: str, by: dt.timedelta) -> Mutation:
    def mutate(frame: pd.DataFrame) -> None:
        frame.loc[1, column] = frame.loc[1, column] + by

    return mutate


MINUTE, DAY_SPAN = dt.timedelta(minutes=1), dt.timedelta(days=1)
DAY_MS = 86_400_000


def _ms(moment: dt.datetime) -> int:
    return int(moment.timestamp() * 1000)


def _copy_first_row(frame: pd.DataFrame) -> None:
    frame.iloc[1] = frame.iloc[0]


def _nothing_measured(frame: pd.DataFrame) -> None:
    for column in frame.columns:
        if column in ("measured", "scroll_depth_sum", "scroll_depth_count") or column.endswith(
            ("_good", "_needs_improvement", "_poor")
        ):
            frame.loc[1, column] = 0


KEYS_1H = "site_id, window_start, dimension, value unique"
DEFECTS: list[tuple[str, str, Mutation, str]] = [
    ("raw.pageviews", "a duplicated event", _copy_first_row, "event_id unique"),
    ("raw.pageviews", "a missing visitor", _set("visitor_id", None), "visitor_id not null"),
    ("raw.pageviews", "a negative duration", _set("engagement_ms", -5), "engagement_ms in [0, 86400000]"),
    ("raw.pageviews", "an event of another day", _set("event_time", _ms(NOW)), "event_time within the partition's day"),
    ("raw.pageviews", "seconds stored as ms", _set("ts_received", 1_768_000_000), "ts_received within sane bounds"),
    ("raw.pageviews", "an unknown event type", _set("type", "click"), "type known"),
    (
        "raw.pageviews",
        "a broken skew correction",
        _set("ts_received", _ms(NOW) - 2 * DAY_MS),
        "arrival_delay_ms >= -600000",
    ),
    ("raw.pageviews", "no Kafka position", _set("kafka_offset", None), "kafka_offset not null"),
    ("raw.rejected", "an unknown failure kind", _set("kind", "oops"), "kind known"),
    ("agg.traffic_1m", "a negative count", _set("pageviews", -1), "pageviews >= 0"),
    ("agg.traffic_1m", "a window too long", _shift("window_end", MINUTE), "window_seconds in [60, 60]"),
    ("agg.traffic_1h", "a doubled key", _copy_first_row, KEYS_1H),
    (
        "agg.traffic_1d",
        "a window of another day",
        _shift("window_start", 2 * DAY_SPAN),
        "window_start within the partition's day",
    ),
    ("agg.sessions", "a negative duration", _set("duration_ms", -1), "duration_ms in [0, 86400000]"),
    ("agg.sessions", "an end before the start", _shift("session_end", -60 * MINUTE), "session_seconds >= 0"),
    ("agg.visits_1d", "more bounces than visits", _set("bounces", 5), "visits >= bounces"),
    ("agg.visits_1d", "a lost column", lambda f: f.drop(columns="bounces", inplace=True), "columns"),
    ("agg.late_events", "a negative late count", _set("late_rows", -1), "late_rows >= 0"),
    ("agg.props_1d", "a row of no event", _set("events", 0), "events >= 1"),
    ("agg.props_1d", "a missing key", _set("key", None), "key not null"),
    ("agg.props_1d", "a missing sketch", _set("visitors_sketch", None), "visitors_sketch not null"),
    ("agg.props_1d", "a doubled key", _copy_first_row, "site_id, window_start, name, key, value unique"),
    (
        "agg.props_1d",
        "a window of an hour",
        _shift("window_end", -23 * 60 * MINUTE),
        "window_seconds in [86400, 86400]",
    ),
    ("agg.props_1d", "an empty key", _set("key", ""), "key_length in [1, 64]"),
    ("agg.props_1d", "a key ingest refuses", _set("key", "k" * 65), "key_length in [1, 64]"),
    ("agg.props_1d", "a value ingest refuses", _set("value", "v" * 257), "value_length in [0, 256]"),
    ("agg.props_1d", "a quoted value still too long", _set("value", "'=" + "v" * 256), "value_length in [0, 256]"),
    ("agg.props_1d", "a name ingest refuses", _set("name", "n" * 257), "name_length in [1, 256]"),
    ("agg.vitals_1h", "more banded LCPs than beacons", _set("lcp_good", 99), "measured >= lcp_banded"),
    ("agg.vitals_1h", "a negative band count", _set("inp_poor", -1), "inp_poor >= 0"),
    ("agg.vitals_1h", "a row of no beacon", _nothing_measured, "beacons >= 1"),
    ("agg.vitals_1h", "a scroll depth past the page", _set("scroll_depth_sum", 101), "scroll_depth_mean in [0, 100]"),
    ("agg.vitals_1h", "a dimension the view has not", _set("dimension", "country"), "dimension known"),
    ("agg.vitals_1h", "a window of a minute", _shift("window_end", -59 * MINUTE), "window_seconds in [3600, 3600]"),
    ("raw.pageviews", "a CLS ingest refuses", _set("cls", 1001.0), "cls in [0, 1000.0]"),
    ("raw.pageviews", "a scroll depth past the page", _set("scroll_depth", 101), "scroll_depth in [0, 100]"),
]


@pytest.mark.parametrize(("table", "defect", "mutate", "check"), DEFECTS, ids=[f"{d[0]}: {d[1]}" for d in DEFECTS])
def test_a_defect_fails_the_check_that_names_it(
    runner: SuiteRunner, table: str, defect: str, mutate: Mutation, check: str
) -> None:
    frame = well_formed(CONTRACTS[table])
    mutate(frame)
    assert check in _failed(runner, table, frame)


def test_a_failed_check_reports_the_offending_values(runner: SuiteRunner) -> None:
    frame = well_formed(CONTRACTS["agg.traffic_1m"])
    frame.loc[2, "pageviews"] = -7
    (failed,) = [r for r in runner.validate(CONTRACTS["agg.traffic_1m"], DAY, frame, now=NOW) if not r.success]
    assert failed.unexpected_count == 1 and "-7" in failed.observed and failed.column == "pageviews"


def test_a_missing_column_is_named_in_the_checks_that_need_it(runner: SuiteRunner) -> None:
    frame = well_formed(CONTRACTS["agg.ratelimit"]).drop(columns="pageviews")
    results = runner.validate(CONTRACTS["agg.ratelimit"], DAY, frame, now=NOW)
    assert any('"missing_column": "pageviews"' in r.observed for r in results if not r.success)


def test_freshness_is_checked_on_todays_partition_only(runner: SuiteRunner) -> None:
    contract = CONTRACTS["raw.pageviews"]
    today = NOW.date()
    frame = well_formed(contract, today)
    frame["ts_received"] = _ms(NOW - dt.timedelta(hours=2))
    frame["event_time"] = frame["ts_received"] - 1000
    assert _failed(runner, "raw.pageviews", frame, today) == ["ts_received fresh"]
    frame["ts_received"] = _ms(NOW - dt.timedelta(minutes=5))
    frame["event_time"] = frame["ts_received"] - 1000
    assert _failed(runner, "raw.pageviews", frame, today) == []
    suites = {r.suite for r in runner.validate(contract, DAY, well_formed(contract), now=NOW)}
    assert suites == {"raw.pageviews"}


def test_an_empty_partition_today_is_stale(runner: SuiteRunner) -> None:
    frame = well_formed(CONTRACTS["agg.active_5m"], NOW.date()).iloc[:0]
    assert "has rows today" in _failed(runner, "agg.active_5m", frame, NOW.date())


def test_freshness_can_be_switched_off() -> None:
    quiet = SuiteRunner(QualitySettings(freshness_minutes=0))
    frame = well_formed(CONTRACTS["agg.traffic_1m"], NOW.date()).iloc[:0]
    results = quiet.validate(CONTRACTS["agg.traffic_1m"], NOW.date(), frame, now=NOW)
    assert all(r.success for r in results) and {r.suite for r in results} == {"agg.traffic_1m"}


def test_column_types_are_checked_against_the_delta_schema() -> None:
    contract = CONTRACTS["agg.sessions"]
    types = dict(contract.columns) | {"pageviews": "string", "extra_column": "long"}
    result = schema_result(contract, DAY, types)
    assert not result.success and "pageviews" in result.observed and "extra_column" not in result.observed
    assert schema_result(contract, DAY, dict(contract.columns)).success


def test_property_texts_may_reach_ingests_bounds_and_a_quote_before_a_formula_is_not_counted(
    runner: SuiteRunner,
) -> None:
    frame = well_formed(CONTRACTS["agg.props_1d"])
    frame["name"] = ["n" * 256, "'=" + "n" * 255, "(none)"]
    frame["key"] = ["k" * 64, "'+" + "k" * 63, "k"]
    frame["value"] = ["v" * 256, "'@" + "v" * 255, ""]
    assert _failed(runner, "agg.props_1d", frame) == []


def test_the_property_bounds_are_the_ones_ingest_enforces() -> None:
    from ingest import beacon

    assert (MAX_PROP_KEY, MAX_PROP_VALUE, FORMULA_PREFIXES) == (
        beacon.MAX_PROP_KEY,
        beacon.MAX_PROP_VALUE,
        beacon.FORMULA_PREFIXES,
    )
    assert MAX_EVENT_NAME == beacon.MAX_PROP_VALUE  # `n` is bounded like a property value
