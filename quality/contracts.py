"""What every checked table must look like: its columns, keys and value ranges, per date partition.

Pure domain code: no Great Expectations, Delta or Kafka here. ``quality.suites`` turns each
contract into a GX expectation suite. Thresholds come from ``QualitySettings``; bounds that depend
on the partition being checked (its day, the time of the check) are named parameters filled in
at validation time, so one suite per table serves every date.

The raw tables' columns come from the shared schema. The views are defined by Spark code
(``jobs/``), so their contract is written out here; a unit test keeps the two in step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from tally.deadletter import FAILURE_KINDS
from tally.dimensions import ALL, AUDIENCE_DIMENSIONS, TRAFFIC_DIMENSION_NAMES, VISIT_DIMENSION_NAMES, visit_column
from tally.schema import EVENT_TYPES, FIELDS, RAW_EXTRA_FIELDS
from tally.settings import QualitySettings
from tally.tables import (
    ACTIVE_5M,
    ALL_VIEWS,
    EVENTS,
    LATE_EVENTS,
    PROPS_1D,
    RATELIMIT,
    RAW_PAGEVIEWS,
    RAW_REJECTED,
    SESSIONS,
    TRAFFIC_1D,
    TRAFFIC_1H,
    TRAFFIC_1M,
    VISITS_1D,
    VISITS_1H,
    VITALS_1H,
)
from tally.vitals import (
    BANDS,
    MEASURED_COLUMN,
    SCROLL_COUNT_COLUMN,
    SCROLL_DEPTH_COLUMN,
    SCROLL_DEPTH_MAX,
    SCROLL_SUM_COLUMN,
    VITALS,
    VITALS_DIMENSIONS,
)

TimeKind = Literal["ms", "timestamp"]  # epoch milliseconds (raw) or a Delta timestamp (views)

# Delta's own type names (as delta-rs reports them), from Spark SQL and Arrow type names.
_DELTA_TYPES = {
    "STRING": "string",
    "BIGINT": "long",
    "INT": "integer",
    "BOOLEAN": "boolean",
    "DOUBLE": "double",
    "DATE": "date",
    "TIMESTAMP": "timestamp",
    "BINARY": "binary",
    "MAP<STRING,STRING>": "map<string,string>",
}
_ARROW_TO_DELTA = {
    "string": "string",
    "int64": "long",
    "int32": "integer",
    "double": "double",
    "bool": "boolean",
    "date32[day]": "date",
}


def _ddl(columns: str) -> dict[str, str]:
    """``"name TYPE, …"`` (Spark SQL, as ``jobs/`` declares schemas) as column -> Delta type."""
    pairs = (item.split() for item in columns.split(","))
    return {name: _DELTA_TYPES[sql_type] for name, sql_type in pairs}


def _names(names: str) -> tuple[str, ...]:
    return tuple(names.split())


# What ingest lets through (ingest/beacon.py; a unit test keeps these in step): an event name of at most
# 256 characters, property keys of 1-64 and values of at most 256. Ingest bounds the text as sent, then
# prefixes text a spreadsheet would run as a formula with a quote, so the stored text may be one longer.
MAX_EVENT_NAME = 256
MAX_PROP_KEY = 64
MAX_PROP_VALUE = 256
FORMULA_PREFIXES = ("=", "+", "-", "@")

# The checked tables, in the order `tally check` runs them (the CLI lists them without building contracts).
CHECKED_TABLES = (RAW_PAGEVIEWS, RAW_REJECTED, *(spec.table for spec in ALL_VIEWS))


@dataclass(frozen=True)
class Range:
    """``minimum <= column <= maximum`` on every non-null row (None: unbounded)."""

    column: str
    minimum: float | None
    maximum: float | None = None


@dataclass(frozen=True)
class Difference:
    """A column derived before validation: ``later - earlier`` (in seconds for timestamps)."""

    name: str
    later: str
    earlier: str


@dataclass(frozen=True)
class Total:
    """A column derived before validation: the sum of ``parts`` on each row."""

    name: str
    parts: tuple[str, ...]


@dataclass(frozen=True)
class Ratio:
    """A column derived before validation: ``numerator / denominator``, null where the denominator is 0."""

    name: str
    numerator: str
    denominator: str


@dataclass(frozen=True)
class SentLength:
    """A column derived before validation: the characters of ``text`` as the tracker sent it.

    That is the stored length, less the quote ingest put before a formula prefix (``FORMULA_PREFIXES``).
    """

    name: str
    text: str


@dataclass(frozen=True)
class Contract:
    """The checks of one table, applied to one date partition at a time."""

    table: str
    partition_by: str
    columns: Mapping[str, str]  # required column -> Delta type; extra columns are allowed (additive evolution)
    keys: tuple[str, ...]  # unique together within a partition, and never null
    not_null: tuple[str, ...] = ()
    ranges: tuple[Range, ...] = ()
    in_sets: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    at_least: tuple[tuple[str, str], ...] = ()  # (a, b): a >= b on every row
    day_column: tuple[str, TimeKind] | None = None  # falls within the partition's day
    sane_times: tuple[tuple[str, TimeKind], ...] = ()  # within [earliest_year, now + clock skew]
    differences: tuple[Difference, ...] = ()
    totals: tuple[Total, ...] = ()
    ratios: tuple[Ratio, ...] = ()
    sent_lengths: tuple[SentLength, ...] = ()
    freshness: tuple[str, TimeKind] | None = None  # today's newest value must be recent


def _raw_pageviews(q: QualitySettings) -> Contract:
    columns = {name: _DELTA_TYPES[sql] for name, (sql, _) in FIELDS.items()}
    columns |= {name: _DELTA_TYPES[sql] for name, sql in RAW_EXTRA_FIELDS.items()}
    skew_ms = q.clock_skew_minutes * 60_000
    return Contract(
        table=RAW_PAGEVIEWS,
        partition_by="event_date",
        columns=columns,
        keys=("event_id",),
        not_null=_names(
            "type site_id url path visitor_id event_time ts_received is_bot schema_version event_date"
            " kafka_partition kafka_offset"
        ),
        ranges=(
            Range("engagement_ms", 0, q.max_engagement_minutes * 60_000),
            Range("load_ms", 0, q.max_load_seconds * 1000),
            # Core Web Vitals and scroll depth within what ingest accepts (tally/vitals.py).
            *(Range(v.column, 0, v.upper) for v in VITALS),
            Range(SCROLL_DEPTH_COLUMN, 0, SCROLL_DEPTH_MAX),
            Range("screen_w", 0),
            Range("schema_version", 1),
            Range("kafka_partition", 0),
            Range("kafka_offset", 0),
            # event_time is ts_event corrected by (ts_received - ts_sent), so it is never much later
            # than the arrival; a negative delay beyond the skew means a broken correction.
            Range("arrival_delay_ms", -skew_ms),
        ),
        in_sets={"type": EVENT_TYPES},
        day_column=("event_time", "ms"),
        sane_times=(("ts_received", "ms"),),
        differences=(Difference("arrival_delay_ms", "ts_received", "event_time"),),
        freshness=("ts_received", "ms"),
    )


def _raw_rejected() -> Contract:
    from tally.table_schemas import RAW_REJECTED_SCHEMA

    return Contract(
        table=RAW_REJECTED,
        partition_by="rejected_date",
        columns={f.name: _ARROW_TO_DELTA[str(f.type)] for f in RAW_REJECTED_SCHEMA},
        keys=("source_topic", "kafka_partition", "kafka_offset"),
        not_null=_names("kind received_at component payload_size truncated rejected_date"),
        ranges=(
            Range("status", 0, 599),
            Range("payload_size", 0),
            Range("kafka_partition", 0),
            Range("kafka_offset", 0),
        ),
        in_sets={"kind": tuple(sorted(FAILURE_KINDS))},
        day_column=("received_at", "ms"),
    )


_WINDOW_KEYS = ("site_id", "window_start", "dimension", "value")
_WINDOWED = "site_id STRING, window_start TIMESTAMP, window_end TIMESTAMP"
_WINDOW_LENGTH = Difference("window_seconds", "window_end", "window_start")


def _traffic(table: str, seconds: int) -> Contract:
    return Contract(
        table=table,
        partition_by="event_date",
        columns=_ddl(
            f"{_WINDOWED}, dimension STRING, value STRING, pageviews BIGINT, events BIGINT, visitors_sketch BINARY,"
            " engagement_ms_digest BINARY, load_ms_digest BINARY, event_date DATE"
        ),
        keys=_WINDOW_KEYS,
        not_null=_names("window_end pageviews events visitors_sketch"),
        ranges=(Range("pageviews", 0), Range("events", 0), Range("window_seconds", seconds, seconds)),
        in_sets={"dimension": TRAFFIC_DIMENSION_NAMES},
        day_column=("window_start", "timestamp"),
        differences=(_WINDOW_LENGTH,),
        freshness=("window_end", "timestamp") if seconds == 60 else None,
    )


def _active_5m() -> Contract:
    return Contract(
        table=ACTIVE_5M.table,
        partition_by="event_date",
        columns=_ddl(f"{_WINDOWED}, visitors_sketch BINARY, pageviews BIGINT, event_date DATE"),
        keys=("site_id", "window_start"),
        not_null=_names("window_end pageviews visitors_sketch"),
        ranges=(Range("pageviews", 0), Range("window_seconds", 300, 300)),
        day_column=("window_start", "timestamp"),
        differences=(_WINDOW_LENGTH,),
        freshness=("window_end", "timestamp"),
    )


def _sessions(q: QualitySettings) -> Contract:
    return Contract(
        table=SESSIONS.table,
        partition_by="event_date",
        columns=_ddl(
            "site_id STRING, visitor_id STRING, session_start TIMESTAMP, session_end TIMESTAMP, duration_ms BIGINT,"
            " pageviews BIGINT, events BIGINT, engaged_ms BIGINT, bounce BOOLEAN, entry_page STRING, exit_page STRING,"
            " source STRING, channel STRING, campaign STRING, country STRING, region STRING, city STRING,"
            " browser STRING, os STRING, device STRING, event_date DATE"
        ),
        keys=("site_id", "visitor_id", "session_start"),
        not_null=_names("session_end duration_ms pageviews events engaged_ms bounce"),
        # A visit has at least one page view (jobs/sessions.py leaves the others out).
        ranges=(
            Range("duration_ms", 0, q.max_session_hours * 3_600_000),
            Range("pageviews", 1),
            Range("events", 0),
            Range("engaged_ms", 0),
            Range("session_seconds", 0),
        ),
        day_column=("session_start", "timestamp"),
        # A derived difference, not a GX column pair: GX's pair check trips over tz-aware timestamps.
        differences=(Difference("session_seconds", "session_end", "session_start"),),
    )


def _events() -> Contract:
    audience = ", ".join(f"{c} STRING, {visit_column(c)} STRING" for c in AUDIENCE_DIMENSIONS)
    return Contract(
        table=EVENTS.table,
        partition_by="event_date",
        columns=_ddl(
            "site_id STRING, visitor_id STRING, event_id STRING, event_ts TIMESTAMP, type STRING, name STRING,"
            f" path STRING, engagement_ms BIGINT, visit_id STRING, visit_seq INT, visit_start TIMESTAMP,"
            f" {visit_column('entry_page')} STRING, {audience}, event_date DATE"
        )
        | {"props": "map<string,string>"},
        keys=EVENTS.keys,
        not_null=_names("visitor_id event_ts type visit_id visit_seq"),
        # The first event of a visit is its place 1; no event comes before its visit's start.
        ranges=(Range("visit_seq", 1), Range("visit_offset_seconds", 0)),
        day_column=("visit_start", "timestamp"),
        differences=(Difference("visit_offset_seconds", "event_ts", "visit_start"),),
    )


def _visits(table: str, seconds: int) -> Contract:
    return Contract(
        table=table,
        partition_by="event_date",
        columns=_ddl(
            f"{_WINDOWED}, dimension STRING, value STRING, visits BIGINT, bounces BIGINT, duration_ms BIGINT,"
            " pageviews BIGINT, event_date DATE"
        ),
        keys=_WINDOW_KEYS,
        not_null=_names("window_end visits bounces duration_ms pageviews"),
        ranges=(
            Range("visits", 1),
            Range("bounces", 0),
            Range("duration_ms", 0),
            Range("window_seconds", seconds, seconds),
        ),
        in_sets={"dimension": VISIT_DIMENSION_NAMES},
        at_least=(("visits", "bounces"), ("pageviews", "visits")),  # every visit has a page view
        day_column=("window_start", "timestamp"),
        differences=(_WINDOW_LENGTH,),
    )


def _ratelimit() -> Contract:
    return Contract(
        table=RATELIMIT.table,
        partition_by="event_date",
        columns=_ddl(f"{_WINDOWED}, client_hash STRING, pageviews BIGINT, event_date DATE"),
        keys=("site_id", "client_hash", "window_start"),
        not_null=_names("window_end pageviews"),
        ranges=(Range("pageviews", 1), Range("window_seconds", 3600, 3600)),
        day_column=("window_start", "timestamp"),
        differences=(_WINDOW_LENGTH,),
    )


def _props_1d() -> Contract:
    # Bots' events are never counted, but the view keeps no is_bot column: `tally audit` (quality.raw_props)
    # names rows that no non-bot custom event of raw carried.
    return Contract(
        table=PROPS_1D.table,
        partition_by=PROPS_1D.partition_by,
        columns=_ddl(
            f"{_WINDOWED}, name STRING, key STRING, value STRING, events BIGINT, visitors_sketch BINARY,"
            " event_date DATE"
        ),
        keys=PROPS_1D.keys,
        not_null=_names("window_end events visitors_sketch"),
        # A row exists because an event carried the property; a missing name or value is `(none)`.
        ranges=(
            Range("events", 1),
            Range("window_seconds", 86400, 86400),
            Range("name_length", 1, MAX_EVENT_NAME),
            Range("key_length", 1, MAX_PROP_KEY),
            Range("value_length", 0, MAX_PROP_VALUE),
        ),
        day_column=("window_start", "timestamp"),
        differences=(_WINDOW_LENGTH,),
        sent_lengths=(
            SentLength("name_length", "name"),
            SentLength("key_length", "key"),
            SentLength("value_length", "value"),
        ),
    )


def _vitals_1h() -> Contract:
    # Per vital, the bands count the beacons that measured it: at most `measured`, as a beacon may lack
    # a metric (INP needs an interaction). A row exists because a vitals beacon or a scroll depth was sent.
    bands = tuple(Total(f"{v.name}_banded", tuple(v.band_column(b) for b in BANDS)) for v in VITALS)
    beacons = Total("beacons", (MEASURED_COLUMN, SCROLL_COUNT_COLUMN))
    counts = (
        MEASURED_COLUMN,
        *(v.band_column(b) for v in VITALS for b in BANDS),
        SCROLL_SUM_COLUMN,
        SCROLL_COUNT_COLUMN,
    )
    digests = ", ".join(
        f"{v.digest_column} BINARY, {', '.join(f'{v.band_column(b)} BIGINT' for b in BANDS)}" for v in VITALS
    )
    return Contract(
        table=VITALS_1H.table,
        partition_by=VITALS_1H.partition_by,
        columns=_ddl(
            f"{_WINDOWED}, dimension STRING, value STRING, {MEASURED_COLUMN} BIGINT, {digests},"
            f" {SCROLL_SUM_COLUMN} BIGINT, {SCROLL_COUNT_COLUMN} BIGINT, event_date DATE"
        ),
        keys=VITALS_1H.keys,
        not_null=("window_end", *counts),
        ranges=(
            *(Range(column, 0) for column in counts),
            Range("beacons", 1),
            Range("scroll_depth_mean", 0, SCROLL_DEPTH_MAX),
            Range("window_seconds", 3600, 3600),
        ),
        in_sets={"dimension": (ALL, *VITALS_DIMENSIONS)},
        at_least=tuple((MEASURED_COLUMN, total.name) for total in bands),
        day_column=("window_start", "timestamp"),
        differences=(_WINDOW_LENGTH,),
        totals=(*bands, beacons),
        ratios=(Ratio("scroll_depth_mean", SCROLL_SUM_COLUMN, SCROLL_COUNT_COLUMN),),
    )


def _late_events() -> Contract:
    return Contract(
        table=LATE_EVENTS.table,
        partition_by="event_date",
        columns=_ddl(
            "query STRING, batch_id BIGINT, recorded_at TIMESTAMP, watermark TIMESTAMP, late_rows BIGINT,"
            " event_date DATE"
        ),
        keys=("query", "batch_id"),
        not_null=_names("recorded_at late_rows"),
        ranges=(Range("batch_id", 0), Range("late_rows", 0)),
        day_column=("recorded_at", "timestamp"),
    )


def contracts(q: QualitySettings) -> dict[str, Contract]:
    """Every checked table's contract, by table name, in the order ``tally check`` runs them."""
    every = (
        _raw_pageviews(q),
        _raw_rejected(),
        _traffic(TRAFFIC_1M.table, 60),
        _traffic(TRAFFIC_1H.table, 3600),
        _traffic(TRAFFIC_1D.table, 86400),
        _active_5m(),
        _sessions(q),
        _events(),
        _visits(VISITS_1H.table, 3600),
        _visits(VISITS_1D.table, 86400),
        _ratelimit(),
        _props_1d(),
        _vitals_1h(),
        _late_events(),
    )
    assert tuple(c.table for c in every) == CHECKED_TABLES, "CHECKED_TABLES must list every contract, in order"
    return {c.table: c for c in every}
