"""Every table Tally keeps, by name, with the keys of the derived views (their Arrow schemas, for the
tables written outside Spark, are in :mod:`tally.table_schemas`).

Each name is written here once; apps import it rather than spelling ``"agg.traffic_1d"`` again.
Every table of the log and its views is partitioned by a DATE column, so a backfill or a check
replaces whole dates; imported history is not (an import is added and removed whole).
"""

from __future__ import annotations

from dataclasses import dataclass

RAW_PAGEVIEWS = "raw.pageviews"
RAW_REJECTED = "raw.rejected"
QUALITY_RESULTS = "quality.results"
QUALITY_AUDITS = "quality.audits"
QUALITY_PARTITIONS = "quality.partitions"
# History imported from another tool (imports/): one row per day and dimension value of one of the
# export's tables, beside the log's views and never mixed into them; each import one commit.
IMPORTED_DAILY = "imported.daily"
# History another tool exports as totals of a range, without dates (Umami's export): one row per
# value of one of its files, its figure over the whole range the export was asked for. Kept apart
# from the daily rows, since no day can be told from it, and answered only for that range whole.
IMPORTED_RANGES = "imported.ranges"


@dataclass(frozen=True)
class ViewSpec:
    """A derived table: its name and key columns (for idempotent upserts).

    Every view is partitioned by ``event_date`` (the UTC date of its window or session
    start), so a backfill replaces whole dates atomically.
    """

    table: str
    keys: tuple[str, ...]
    partition_by: str = "event_date"
    # Columns the view's frame carries for a view derived from it, never written to its own table.
    carried: tuple[str, ...] = ()


WINDOW_KEYS = ("site_id", "window_start", "dimension", "value")

TRAFFIC_1M = ViewSpec("agg.traffic_1m", WINDOW_KEYS)
TRAFFIC_1H = ViewSpec("agg.traffic_1h", WINDOW_KEYS)
TRAFFIC_1D = ViewSpec("agg.traffic_1d", WINDOW_KEYS)
ACTIVE_5M = ViewSpec("agg.active_5m", ("site_id", "window_start"))
# A closed visit's frame carries its events (jobs/sessions.py), from which agg.events is written.
SESSIONS = ViewSpec("agg.sessions", ("site_id", "visitor_id", "session_start"), carried=("visit_events",))
# One row per event of a closed visit: the event's own columns, and its visit's id, place and
# attributes; partitioned, as agg.sessions, by the UTC date of the visit's start, so a backfill of a
# date writes its visits' events whole.
EVENTS = ViewSpec("agg.events", ("site_id", "visit_start", "event_id"))
VISITS_1H = ViewSpec("agg.visits_1h", WINDOW_KEYS)
VISITS_1D = ViewSpec("agg.visits_1d", WINDOW_KEYS)
RATELIMIT = ViewSpec("agg.ratelimit", ("site_id", "client_hash", "window_start"))
LATE_EVENTS = ViewSpec("agg.late_events", ("query", "batch_id"))
# Custom properties: per site, UTC day (window), event name, property key and value (tally/props.py).
PROPS_1D = ViewSpec("agg.props_1d", ("site_id", "window_start", "name", "key", "value"))
# Core Web Vitals and scroll depth: per site, UTC hour, dimension (all, page, device) and value (tally/vitals.py).
VITALS_1H = ViewSpec("agg.vitals_1h", WINDOW_KEYS)

# Every view a backfill recomputes, in dependency order (coarser grains read finer ones).
BACKFILL_VIEWS = (
    TRAFFIC_1M,
    TRAFFIC_1H,
    TRAFFIC_1D,
    ACTIVE_5M,
    SESSIONS,
    EVENTS,
    VISITS_1H,
    VISITS_1D,
    RATELIMIT,
    PROPS_1D,
    VITALS_1H,
)
# Every view; each has a data-quality contract (quality/contracts.py) that `tally check` applies.
ALL_VIEWS = (*BACKFILL_VIEWS, LATE_EVENTS)
# The views that hold visitor ids: forgetting a visitor rebuilds their dates and VACUUMs these now.
VISITOR_VIEWS = (SESSIONS, EVENTS)
# The traffic and visit tables by grain (the dashboard picks one by the range it shows).
TRAFFIC_BY_GRAIN = {"minute": TRAFFIC_1M, "hour": TRAFFIC_1H, "day": TRAFFIC_1D}
VISITS_BY_GRAIN = {"hour": VISITS_1H, "day": VISITS_1D}

QUALITY_TABLES = (QUALITY_RESULTS, QUALITY_AUDITS, QUALITY_PARTITIONS)
# Every table, raw first; `tally sql` registers these names.
ALL_TABLES = (
    RAW_PAGEVIEWS,
    RAW_REJECTED,
    *(spec.table for spec in ALL_VIEWS),
    *QUALITY_TABLES,
    IMPORTED_DAILY,
    IMPORTED_RANGES,
)

# Each archiver commit records, per Kafka (topic, partition), the next offset to read as a Delta
# application transaction with this app id: the raw table itself says how far it holds the log.
ARCHIVER_APP_ID_PREFIX = "tally-archiver"


def archiver_app_id(topic: str, partition: int) -> str:
    """The Delta application-transaction id under which raw tables record their offsets of (topic, partition)."""
    return f"{ARCHIVER_APP_ID_PREFIX}:{topic}:{partition}"
