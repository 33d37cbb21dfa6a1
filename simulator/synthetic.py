"""Synthetic *enriched* events in bulk, column by column (numpy -> Arrow), for tests and benches.

``simulator.generator`` sends realistic beacons through ingest; this module skips ingest and
builds what ingest would have produced, fast enough for 10M-event backfill benchmarks.
Seeded, so the same call gives the same events. Visits are modelled: each has a visitor,
1..N page views a minute or so apart, engagement after most page views, a few custom events.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa

from tally.schema import SCHEMA_VERSION
from tally.table_schemas import raw_pageviews_schema

PATHS = np.array(
    ["/", "/pricing", "/docs", "/docs/install", "/docs/api", "/blog", "/blog/exactly-once", "/about", "/signup"]
)
SOURCES = np.array(["", "Google", "DuckDuckGo", "Hacker News", "GitHub", "Newsletter"])
CHANNELS = np.array(["Direct", "Organic Search", "Organic Search", "Referral", "Referral", "Email"])
COUNTRIES = np.array(["US", "DE", "FR", "GB", "IN", "BR", "JP", ""])
BROWSERS = np.array(["Chrome", "Firefox", "Safari", "Edge"])
OSES = np.array(["Windows", "Mac OS X", "iOS", "Android", "Linux"])
DEVICES = np.array(["desktop", "mobile", "tablet"])
EVENT_NAMES = np.array(["signup", "download", "outbound"])
# Custom events carry a property, taken from the visitor (no extra draws, so every other column
# stays as it was for a given seed): the plan a visitor signs up for or downloads in.
PLANS = ("free", "pro", "team")
# Region and city (what ingest stores with geo.city_db) follow the country, again with no extra draws.
REGIONS = {"US": "US-CA", "DE": "DE-BE", "FR": "FR-IDF", "GB": "GB-ENG", "IN": "IN-MH", "BR": "BR-SP", "JP": "JP-13"}
CITIES = {"US": "San Francisco", "DE": "Berlin", "FR": "Paris", "GB": "London", "IN": "Mumbai", "BR": "São Paulo"}


def _pick(rng: np.random.Generator, values: np.ndarray, n: int, skew: float = 1.3) -> np.ndarray:
    weights = 1.0 / np.arange(1, len(values) + 1) ** skew
    return values[rng.choice(len(values), size=n, p=weights / weights.sum())]


def _where(condition: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` where ``condition`` holds, else null (an object array for Arrow)."""
    out = np.full(len(values), None, dtype=object)
    out[condition] = values[condition]
    return out


def _hex_ids(rng: np.random.Generator, n: int) -> np.ndarray:
    raw = rng.integers(0, 2**63, size=(n, 2), dtype=np.int64)
    return np.array([f"{a:016x}{b:016x}" for a, b in raw])


def synthetic_events(
    *,
    visits: int,
    start: dt.datetime,
    span: dt.timedelta,
    site_id: str = "demo.tally.local",
    visitors: int | None = None,
    seed: int = 7,
) -> pa.Table:
    """Enriched events of ``visits`` visits starting within ``[start, start + span)``.

    Returns an Arrow table with the ``raw.pageviews`` schema (Kafka columns null). About 4.4
    events per visit: 2.6 page views, 1.6 engagement events, 0.2 custom events.
    """
    rng = np.random.default_rng(seed)
    visitors = visitors or max(1, visits // 2)
    visitor_ids, client_hashes = _hex_ids(rng, visitors), _hex_ids(rng, visitors)
    bots = rng.random(visitors) < 0.02
    visit_visitor = rng.integers(0, visitors, size=visits)
    visit_start = int(start.timestamp() * 1000) + rng.integers(0, int(span.total_seconds() * 1000), size=visits)
    views_per_visit = np.minimum(rng.geometric(0.38, size=visits), 30)

    # One row per page view: its visit, and its time after the visit's start (a cumulative sum of gaps).
    visit_of_view = np.repeat(np.arange(visits), views_per_visit)
    gaps = rng.exponential(70_000, size=len(visit_of_view)).astype(np.int64)
    first_in_visit = np.r_[True, visit_of_view[1:] != visit_of_view[:-1]]
    gaps[first_in_visit] = 0
    cumulative = np.cumsum(gaps)
    offset = cumulative - np.repeat(cumulative[first_in_visit], views_per_visit)
    view_time = visit_start[visit_of_view] + offset

    engaged = rng.random(len(visit_of_view)) < 0.6
    custom = rng.random(len(visit_of_view)) < 0.08
    n_views, n_eng, n_custom = len(visit_of_view), int(engaged.sum()), int(custom.sum())
    kind = np.concatenate([np.zeros(n_views, np.int8), np.ones(n_eng, np.int8), np.full(n_custom, 2, np.int8)])
    row_view = np.concatenate([np.arange(n_views), np.flatnonzero(engaged), np.flatnonzero(custom)])
    n = len(kind)
    engagement_ms = rng.exponential(40_000, size=n).astype(np.int64) + 500
    load_ms = rng.lognormal(6.6, 0.6, size=n).astype(np.int64)
    event_time = view_time[row_view] + np.where(kind == 1, engagement_ms, np.where(kind == 2, 5_000, 0))

    visit = visit_of_view[row_view]
    visitor = visit_visitor[visit]
    paths = _pick(rng, PATHS, n_views)[row_view]
    source_idx = rng.choice(len(SOURCES), size=visits, p=[0.4, 0.3, 0.05, 0.1, 0.1, 0.05])[visit]
    country = _pick(rng, COUNTRIES, visitors)[visitor]
    browser, os_, device = (
        _pick(rng, BROWSERS, visitors)[visitor],
        _pick(rng, OSES, visitors)[visitor],
        _pick(rng, DEVICES, visitors)[visitor],
    )
    types = np.array(["pageview", "engagement", "event"])[kind]
    names = _where(kind == 2, _pick(rng, EVENT_NAMES, n))
    sources = SOURCES[source_idx]

    def nullable(values: np.ndarray) -> list[str | None]:
        return [v or None for v in values.tolist()]

    columns = {
        "event_id": _hex_ids(rng, n),
        "type": types,
        "name": names,
        "site_id": np.full(n, site_id),
        "url": np.char.add(f"https://{site_id}", paths),
        "hostname": np.full(n, site_id),
        "path": paths,
        "referrer": None,
        "title": None,
        "ts_event": event_time,
        "ts_sent": event_time,
        "ts_received": event_time,
        "event_time": event_time,
        "screen_w": None,
        "language": None,
        "tz": None,
        "props": [
            [("plan", PLANS[v % len(PLANS)])] if k == 2 else None
            for v, k in zip(visitor.tolist(), kind.tolist(), strict=False)
        ],
        "engagement_ms": _where(kind == 1, engagement_ms),
        "load_ms": _where(kind == 0, load_ms),
        # No Core Web Vitals beacons here (tally/vitals.py): a test that needs them adds its own events.
        "lcp_ms": None,
        "inp_ms": None,
        "cls": None,
        "fcp_ms": None,
        "ttfb_ms": None,
        "scroll_depth": None,
        "visitor_id": visitor_ids[visitor],
        "client_hash": client_hashes[visitor],
        "browser": browser,
        "os": os_,
        "device": device,
        "is_bot": bots[visitor],
        "country": nullable(country),
        "region": [REGIONS.get(c) for c in country.tolist()],
        "city": [CITIES.get(c) for c in country.tolist()],
        "source": nullable(sources),
        "medium": None,
        "channel": CHANNELS[source_idx],
        "campaign": None,
        "utm_source": None,
        "utm_medium": None,
        "utm_campaign": None,
        "utm_term": None,
        "utm_content": None,
        "click_id": None,
        "schema_version": np.full(n, SCHEMA_VERSION, np.int32),
        "event_date": (event_time // 86_400_000).astype("datetime64[D]"),
        "kafka_partition": None,
        "kafka_offset": None,
    }
    schema = raw_pageviews_schema()
    arrays = [
        pa.nulls(n, field.type) if columns[field.name] is None else pa.array(columns[field.name], type=field.type)
        for field in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema).sort_by("event_time")
