"""The shared data set's sites besides the demo site, and their raw events.

The session fixture ``march`` writes these events beside ``march_events()`` and backfills every
view once for all of them. Each site has a test file of its own, which computes its truths here
from these events; none of them is ``MARCH_SITE``, so the demo site's figures (read by the
dashboard, API and notify tests) stay those of ``march_events()`` alone.
"""

from __future__ import annotations

import datetime as dt
import random
import uuid
from typing import Any
from zoneinfo import ZoneInfo

import pyarrow as pa

from simulator.synthetic import synthetic_events
from tally.props import MAX_KEYS_PER_DAY, MAX_VALUES_PER_KEY
from tally.settings import SiteSettings
from tally.table_schemas import RAW_PAGEVIEWS_SCHEMA
from tally.vitals import VITALS

# Core Web Vitals and scroll depth (test_vitals_query.py): two UTC days of measured page views.
# 5 March joins the demo site's days to the time-zone sites': a backfill replaces each run of
# consecutive dates with events by a write of its own.
VITALS_SITE = "vitals.tally.test"
VITALS_DAYS = (dt.date(2026, 3, 4), dt.date(2026, 3, 5))
VITALS_PAGES = ["/", "/pricing", "/docs"]
VITALS_DEVICES = ["desktop", "mobile"]

# Sites in their own time zones (test_site_timezones.py): New York (its 2026 DST starts on 8 March:
# a 23-hour day) and Kolkata (+05:30: its days begin at 18:30 UTC, on a half hour).
NEW_YORK, KOLKATA = "newyork.tally.test", "kolkata.tally.test"
ZONES = {NEW_YORK: "America/New_York", KOLKATA: "Asia/Kolkata"}
LOCAL_DAYS = [dt.date(2026, 3, 7), dt.date(2026, 3, 8), dt.date(2026, 3, 9)]  # 8 March: New York's DST starts
UTC_DAYS = (dt.date(2026, 3, 6), dt.date(2026, 3, 10))  # the local days' instants, and events outside them
ZONE_PAGES = ["/", "/pricing", "/docs"]

# Custom events with properties beside synthetic traffic (test_props_view.py); the Stats API does
# not read this site, so it is not configured.
PROPS_SITE = "props.tally.local"
PROPS_DAYS = (dt.date(2026, 3, 2), dt.date(2026, 3, 3))
WIDE_KEYS = MAX_KEYS_PER_DAY + 5  # on day 1, one event each: only some stay beside `order` and `plan`

# What ``march`` adds to conf/test.yaml's sites.
MARCH_SITES = (
    SiteSettings(site_id=VITALS_SITE, domains=(VITALS_SITE,)),
    *(SiteSettings(site_id=s, domains=(s,), timezone=zone) for s, zone in ZONES.items()),
)


def vitals_beacons(seed: int = 28, pageviews: int = 700) -> list[dict[str, Any]]:
    """Measured page views over two days (some on Google's band edges, some without INP, a few by
    bots), and engagement beacons with a scroll depth."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for i in range(pageviews):
        day = VITALS_DAYS[i % 2]
        at = dt.datetime.combine(day, dt.time(rng.randrange(24), rng.randrange(60)), dt.UTC)
        base = {
            "site_id": VITALS_SITE,
            "hostname": VITALS_SITE,
            "path": rng.choice(VITALS_PAGES),
            "url": f"https://{VITALS_SITE}/",
            "device": rng.choice(VITALS_DEVICES),
            "country": rng.choice(["DE", "FR"]),
            "visitor_id": f"visitor-{i % 90}",
            "is_bot": i % 53 == 0,
            "event_time": int(at.timestamp() * 1000),
            "event_date": day,
            "schema_version": 1,
        }
        vitals: dict[str, Any] = {"event_id": f"v-{i}", "type": "vitals"}
        for v in VITALS:
            if v.name == "inp" and rng.random() < 0.25:
                continue
            value = rng.choice([v.good_max, v.poor_above]) if rng.random() < 0.1 else rng.uniform(0, 1.7 * v.poor_above)
            vitals[v.column] = round(value, 4) if v.name == "cls" else round(value)
        if rng.random() < 0.6:
            vitals["scroll_depth"] = rng.randrange(0, 101)
        rows.append({**base, **vitals})
        if rng.random() < 0.4:
            rows.append({**base, "event_id": f"e-{i}", "type": "engagement", "scroll_depth": rng.randrange(0, 101)})
    return rows


def local_midnights(site: str) -> list[dt.datetime]:
    """The UTC instants at which the site's local days begin (and the last one ends)."""
    zone = ZoneInfo(ZONES[site])
    days = [*LOCAL_DAYS, LOCAL_DAYS[-1] + dt.timedelta(days=1)]
    return [dt.datetime.combine(d, dt.time(), zone).astimezone(dt.UTC) for d in days]


def zone_visits(site: str, rng: random.Random) -> list[dict[str, Any]]:
    """Page views of visits: half start within 50 minutes of a local midnight, the rest anywhere from
    a day before the range to a day after; 1-4 page views each, 1-12 minutes apart."""
    rows: list[dict[str, Any]] = []
    earliest = dt.datetime.combine(UTC_DAYS[0], dt.time(12), dt.UTC)
    span = (dt.datetime.combine(UTC_DAYS[1], dt.time(12), dt.UTC) - earliest).total_seconds()
    edges = local_midnights(site)
    for i in range(260):
        if i % 2:
            start = rng.choice(edges) + dt.timedelta(seconds=rng.randrange(-3000, 3000))
        else:
            start = earliest + dt.timedelta(seconds=rng.randrange(int(span)))
        visitor = f"{site}-visitor-{rng.randrange(120)}"
        at = start
        for j in range(rng.choice([1, 1, 2, 3, 4])):
            at += dt.timedelta(seconds=rng.randrange(60, 720)) if j else dt.timedelta(0)
            pageview = {
                "event_id": f"{site}-{i}-{j}",
                "type": "pageview",
                "site_id": site,
                "hostname": site,
                "path": rng.choice(ZONE_PAGES),
                "url": f"https://{site}/",
                "visitor_id": visitor,
                "is_bot": i % 41 == 0,
                "event_time": int(at.timestamp() * 1000),
                "event_date": at.date(),
                "schema_version": 1,
            }
            rows.append(pageview)
            if rng.random() < 0.5:  # its vitals beacon, at the same instant (visits and visitors unchanged)
                rows.append(
                    {
                        **pageview,
                        "event_id": f"{pageview['event_id']}-v",
                        "type": "vitals",
                        "lcp_ms": rng.randrange(500, 6000),
                    }
                )
    return rows


def zone_events() -> list[dict[str, Any]]:
    """Both time-zone sites' events."""
    return [e for site in ZONES for e in zone_visits(site, random.Random(site))]


def raw_table(rows: list[dict[str, Any]]) -> pa.Table:
    """Event dicts as a ``raw.pageviews`` table (missing columns null), as the archiver writes them."""
    return pa.table(
        {name: [e.get(name) for e in rows] for name in RAW_PAGEVIEWS_SCHEMA.names}, schema=RAW_PAGEVIEWS_SCHEMA
    )


def custom_event(
    template: dict[str, Any], at: dt.datetime, name: str, properties: dict[str, str], visitor: str
) -> dict[str, Any]:
    ms = int(at.timestamp() * 1000)
    return {
        **template,
        "event_id": uuid.uuid4().hex,
        "type": "event",
        "name": name,
        "props": properties,
        "visitor_id": visitor,
        "client_hash": visitor,
        "is_bot": False,
        "ts_event": ms,
        "ts_sent": ms,
        "ts_received": ms,
        "event_time": ms,
        "event_date": at.date(),
    }


def props_events() -> pa.Table:
    """Synthetic traffic with custom events: one key with more values than the cap, more keys in a
    day than the key bound, a bot's event and a page view with properties (neither counts)."""
    first, last = PROPS_DAYS
    traffic = synthetic_events(
        visits=80,
        start=dt.datetime.combine(first, dt.time(8), dt.UTC),
        span=dt.timedelta(hours=30),
        site_id=PROPS_SITE,
        seed=3,
    )
    template = traffic.slice(0, 1).to_pylist()[0]
    rows = []
    for day in (first, last):
        noon = dt.datetime.combine(day, dt.time(12), dt.UTC)
        orders = MAX_VALUES_PER_KEY + 30 if day == first else 12
        for i in range(orders):  # order o000 by the most visitors, then fewer and fewer
            for j in range(1 + (orders - i) // 20):
                at = noon + dt.timedelta(seconds=i)
                rows.append(custom_event(template, at, "purchase", {"order": f"o{i:03d}", "plan": "pro"}, f"v{i}-{j}"))
        for j in range(60):
            plan = ("free", "pro", "team")[j % 3]
            rows.append(custom_event(template, noon + dt.timedelta(minutes=j), "signup", {"plan": plan}, f"s{j}"))
    noon = dt.datetime.combine(first, dt.time(13), dt.UTC)
    for start in range(0, WIDE_KEYS, 20):  # at most 20 properties per event, as ingest allows
        wide = {f"w{k:03d}": "x" for k in range(start, min(start + 20, WIDE_KEYS))}
        rows.append(custom_event(template, noon, "wide", wide, f"w{start}"))
    bot = custom_event(template, noon, "signup", {"plan": "bot-plan"}, "bot")
    page = {**custom_event(template, noon, "signup", {"plan": "page-plan"}, "p"), "type": "pageview", "name": None}
    rows += [{**bot, "is_bot": True}, page]
    return pa.concat_tables([traffic, pa.Table.from_pylist(rows, schema=traffic.schema)])


PROPS_EVENTS = props_events()  # random event ids: made once, for the warehouse and the truths alike


def march_sites_events() -> pa.Table:
    """Every event of these sites."""
    return pa.concat_tables([raw_table(vitals_beacons() + zone_events()), PROPS_EVENTS])
