"""A site's days in its own time zone, through the Stats API over real backfilled views.

Two sites besides conf/test.yaml's (march_sites.py): one in America/New_York (its 2026 DST starts
on 8 March: a 23-hour day) and one in Asia/Kolkata (+05:30: its days begin at 18:30 UTC, on a half
hour). Page views spread over UTC hours and minutes, many near the local midnights, are in
raw.pageviews; one real Spark backfill computed the views (the session's shared ``march``
warehouse); the API answers over HTTP in-process. Every answer for local days equals a truth
computed here from the raw rows with zoneinfo: page views and visits exact, visitors within the
stated 95% bound, visits sessionised as the views do (30 minutes of inactivity ends one, counted
on the local day it started).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import defaultdict
from collections.abc import Iterator
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from starlette.testclient import TestClient

from api.app import create_app
from api.keys import create_key
from tally.settings import Settings
from tests.integration.march_sites import KOLKATA, LOCAL_DAYS, NEW_YORK, ZONES, zone_events

GAP = dt.timedelta(minutes=30)
EVENTS = zone_events()


def local_date(site: str, event_time_ms: int) -> dt.date:
    return dt.datetime.fromtimestamp(event_time_ms / 1000, ZoneInfo(ZONES[site])).date()


def truth(site: str, *, page: str | None = None) -> dict[dt.date, dict[str, Any]]:
    """Per local date: page views, visitor ids, and visits (sessionised over all of the site's events,
    by the local date of their start) with their bounces."""
    out: dict[dt.date, dict[str, Any]] = defaultdict(
        lambda: {"pageviews": 0, "visitors": set(), "visits": 0, "bounces": 0}
    )
    by_visitor: dict[str, list[int]] = defaultdict(list)
    for e in EVENTS:
        if e["site_id"] != site or e["is_bot"] or e["type"] != "pageview":
            continue
        by_visitor[e["visitor_id"]].append(e["event_time"])
        if page is None or e["path"] == page:
            day = out[local_date(site, e["event_time"])]
            day["pageviews"] += 1
            day["visitors"].add(e["visitor_id"])
    gap_ms = GAP // dt.timedelta(milliseconds=1)
    for times in by_visitor.values():
        times.sort()
        session = [times[0]]
        for t in [*times[1:], None]:
            if t is not None and t - session[-1] < gap_ms:
                session.append(t)
                continue
            day = out[local_date(site, session[0])]
            day["visits"] += 1
            day["bounces"] += len(session) == 1
            session = [t] if t is not None else []
    return out


def summed(site: str, days: list[dt.date]) -> dict[str, Any]:
    per_day = truth(site)
    visits_ = sum(per_day[d]["visits"] for d in days)
    return {
        "pageviews": sum(per_day[d]["pageviews"] for d in days),
        "visitors": len(set().union(*(per_day[d]["visitors"] for d in days))),
        "visits": visits_,
        "bounce_rate": round(100 * sum(per_day[d]["bounces"] for d in days) / visits_, 1),
    }


@pytest.fixture(scope="module")
def api(march: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    home = tmp_path_factory.mktemp("site-timezones")
    # The session's shared backfilled tables (read only; its settings know both sites), with a home
    # of its own for the key.
    iso = dataclasses.replace(march, home=str(home), api=dataclasses.replace(march.api, requests_per_hour=100_000))
    assert {s.site_id: s.timezone for s in iso.sites if s.site_id in ZONES} == ZONES
    assert iso.spark.session_gap == GAP
    key, _ = create_key(iso, name="zones", sites=tuple(ZONES), now=dt.datetime.now(dt.UTC))
    with TestClient(create_app(iso), headers={"Authorization": f"Bearer {key}"}) as client:
        yield client


def ask(client: TestClient, site: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = client.post("/api/v2/query", json={"site_id": site, **body})
    assert answer.status_code == 200, answer.text
    result = dict(answer.json())
    assert result["meta"]["timezone"] == ZONES[site]
    return result


def close_enough(estimate: float, exact: int, bound: float) -> bool:
    return abs(estimate - exact) <= max(1.0, bound * exact)


METRICS = ["pageviews", "visits", "bounce_rate", "visitors"]


@pytest.mark.parametrize("site", list(ZONES))
@pytest.mark.parametrize(
    "days", [LOCAL_DAYS, [LOCAL_DAYS[1]], [LOCAL_DAYS[2]]], ids=["three days", "8 March", "9 March"]
)
def test_totals_of_local_days_equal_the_raw_events_of_those_days_in_the_sites_zone(
    api: TestClient, site: str, days: list[dt.date]
) -> None:
    answer = ask(api, site, {"date_range": [days[0].isoformat(), days[-1].isoformat()], "metrics": METRICS})
    assert answer["meta"]["source"] == "aggregates"
    got = dict(zip(METRICS, answer["results"][0]["metrics"], strict=True))
    expected = summed(site, days)
    assert [got[m] for m in ("pageviews", "visits", "bounce_rate")] == [
        expected[m] for m in ("pageviews", "visits", "bounce_rate")
    ]
    assert close_enough(got["visitors"], expected["visitors"], answer["meta"]["metrics"]["visitors"]["bound_95"])


@pytest.mark.parametrize("site", list(ZONES))
def test_a_daily_series_has_one_bucket_per_local_date_equal_to_the_raw_events(api: TestClient, site: str) -> None:
    body = {"date_range": [LOCAL_DAYS[0].isoformat(), LOCAL_DAYS[-1].isoformat()], "dimensions": ["time:day"]}
    answer = ask(api, site, {**body, "metrics": ["pageviews", "visits", "visitors"]})
    per_day = truth(site)
    rows = {r["dimensions"][0]: r["metrics"] for r in answer["results"]}
    assert sorted(rows) == [d.isoformat() for d in LOCAL_DAYS]
    for day in LOCAL_DAYS:
        pageviews, visits_, visitors = rows[day.isoformat()]
        assert [pageviews, visits_] == [per_day[day]["pageviews"], per_day[day]["visits"]], day
        assert close_enough(visitors, len(per_day[day]["visitors"]), answer["meta"]["metrics"]["visitors"]["bound_95"])


def test_new_yorks_dst_day_has_23_hourly_buckets_and_they_add_up_to_the_day(api: TestClient) -> None:
    day = LOCAL_DAYS[1].isoformat()
    body = {"date_range": [day, day], "dimensions": ["time:hour"], "include": {"time_labels": True}}
    answer = ask(api, NEW_YORK, {**body, "metrics": ["pageviews"]})
    labels = answer["meta"]["time_labels"]
    assert len(labels) == 23 and f"{day} 02:00:00" not in labels and f"{day} 03:00:00" in labels
    assert sum(r["metrics"][0] for r in answer["results"]) == truth(NEW_YORK)[LOCAL_DAYS[1]]["pageviews"]


def test_kolkatas_hourly_buckets_are_local_hours_read_from_minutes(api: TestClient) -> None:
    day = LOCAL_DAYS[1]
    answer = ask(
        api, KOLKATA, {"date_range": [day.isoformat()] * 2, "dimensions": ["time:hour"], "metrics": ["pageviews"]}
    )
    zone = ZoneInfo(ZONES[KOLKATA])
    hourly: dict[str, int] = defaultdict(int)
    for e in EVENTS:
        at = dt.datetime.fromtimestamp(e["event_time"] / 1000, zone)
        if e["site_id"] == KOLKATA and not e["is_bot"] and e["type"] == "pageview" and at.date() == day:
            hourly[at.strftime("%Y-%m-%d %H:00:00")] += 1
    assert {r["dimensions"][0]: r["metrics"][0] for r in answer["results"]} == hourly


@pytest.mark.parametrize("site", list(ZONES))
def test_an_exact_answer_from_raw_events_counts_the_same_local_days(api: TestClient, site: str) -> None:
    body = {"date_range": [LOCAL_DAYS[0].isoformat(), LOCAL_DAYS[-1].isoformat()], "dimensions": ["time:day"]}
    answer = ask(api, site, {**body, "metrics": ["pageviews", "visitors"], "filters": [["is", "event:page", ["/"]]]})
    assert answer["meta"]["source"] == "raw"
    expected = truth(site, page="/")
    assert {r["dimensions"][0]: r["metrics"] for r in answer["results"]} == {
        d.isoformat(): [expected[d]["pageviews"], len(expected[d]["visitors"])]
        for d in LOCAL_DAYS
        if expected[d]["pageviews"]
    }


def test_the_events_straddle_the_local_midnights_so_utc_days_would_differ() -> None:
    for site in ZONES:
        in_range = [e for e in EVENTS if e["site_id"] == site and not e["is_bot"] and e["type"] == "pageview"]
        by_utc = sum(1 for e in in_range if LOCAL_DAYS[0] <= e["event_date"] <= LOCAL_DAYS[-1])
        assert by_utc != summed(site, LOCAL_DAYS)["pageviews"], site


@pytest.mark.parametrize("site", list(ZONES))
def test_the_previous_period_of_a_local_day_is_the_local_day_before(api: TestClient, site: str) -> None:
    day = LOCAL_DAYS[2].isoformat()
    body = {"date_range": [day, day], "metrics": ["pageviews", "visits"], "include": {"compare": "previous_period"}}
    answer = ask(api, site, body)
    assert answer["meta"]["comparison_date_range"] == [LOCAL_DAYS[1].isoformat()] * 2
    row = answer["results"][0]
    now, before = summed(site, [LOCAL_DAYS[2]]), summed(site, [LOCAL_DAYS[1]])
    assert row["metrics"] == [now["pageviews"], now["visits"]]
    assert row["comparison"]["metrics"] == [before["pageviews"], before["visits"]]


@pytest.mark.parametrize(("site", "source"), [(NEW_YORK, "aggregates"), (KOLKATA, "raw")])
def test_core_web_vitals_of_local_days_come_from_whole_hours_or_else_exactly_from_raw_events(
    api: TestClient, site: str, source: str
) -> None:
    day = LOCAL_DAYS[1]
    answer = ask(api, site, {"date_range": [day.isoformat()] * 2, "metrics": ["lcp_good", "lcp_poor", "lcp_p75"]})
    assert answer["meta"]["source"] == source  # agg.vitals_1h keeps whole UTC hours: Kolkata's 18:30 edges are not
    values = sorted(
        e["lcp_ms"]
        for e in EVENTS
        if e["site_id"] == site
        and e["type"] == "vitals"
        and not e["is_bot"]
        and local_date(site, e["event_time"]) == day
    )
    good, poor, p75 = answer["results"][0]["metrics"]
    assert good == round(100 * sum(v <= 2500 for v in values) / len(values), 1)
    assert poor == round(100 * sum(v > 4000 for v in values) / len(values), 1)
    rank = sum(v <= p75 for v in values) / len(values)
    assert abs(rank - 0.75) <= 0.005 + 1 / len(values), (p75, rank)
