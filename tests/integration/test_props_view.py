"""agg.props_1d from a real Spark backfill against truths computed here from the events.

Custom events with properties go into raw.pageviews beside synthetic traffic: one key with more
values than the cap, more keys in a day than the key bound, a bot's event and a page view with
properties (neither counts). The table must hold exact events per day, event name, key and value,
and visitors within their bound; ``props()`` must apply the bounds of ``tally/props.py``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections import Counter
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from jobs.backfill import backfill
from query.aggregates import Aggregates, Range, property_keys, props
from tally.props import MAX_KEYS_PER_DAY, MAX_VALUES_PER_KEY, OTHER_VALUE
from tally.settings import Settings
from tally.tables import PROPS_1D
from tests.integration.views_support import view, write_raw
from traffic.synthetic import synthetic_events

SITE = "props.tally.local"
DAYS = Range(dt.date(2026, 4, 1), dt.date(2026, 4, 2))
WIDE_KEYS = MAX_KEYS_PER_DAY + 5  # on day 1, one event each: only some stay beside `order` and `plan`


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


def the_events() -> pa.Table:
    start = dt.datetime.combine(DAYS.start, dt.time(8), dt.UTC)
    traffic = synthetic_events(visits=80, start=start, span=dt.timedelta(hours=30), site_id=SITE, seed=3)
    template = traffic.slice(0, 1).to_pylist()[0]
    rows = []
    for day in (DAYS.start, DAYS.end):
        noon = dt.datetime.combine(day, dt.time(12), dt.UTC)
        orders = MAX_VALUES_PER_KEY + 30 if day == DAYS.start else 12
        for i in range(orders):  # order o000 by the most visitors, then fewer and fewer
            for j in range(1 + (orders - i) // 20):
                at = noon + dt.timedelta(seconds=i)
                rows.append(custom_event(template, at, "purchase", {"order": f"o{i:03d}", "plan": "pro"}, f"v{i}-{j}"))
        for j in range(60):
            plan = ("free", "pro", "team")[j % 3]
            rows.append(custom_event(template, noon + dt.timedelta(minutes=j), "signup", {"plan": plan}, f"s{j}"))
    noon = dt.datetime.combine(DAYS.start, dt.time(13), dt.UTC)
    for first in range(0, WIDE_KEYS, 20):  # at most 20 properties per event, as ingest allows
        wide = {f"w{k:03d}": "x" for k in range(first, min(first + 20, WIDE_KEYS))}
        rows.append(custom_event(template, noon, "wide", wide, f"w{first}"))
    bot = custom_event(template, noon, "signup", {"plan": "bot-plan"}, "bot")
    page = {**custom_event(template, noon, "signup", {"plan": "page-plan"}, "p"), "type": "pageview", "name": None}
    rows += [{**bot, "is_bot": True}, page]
    return pa.concat_tables([traffic, pa.Table.from_pylist(rows, schema=traffic.schema)])


@pytest.fixture(scope="module")
def warehouse(settings: Settings, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    home = tmp_path_factory.mktemp("props-view")
    iso = dataclasses.replace(
        settings, home=str(home), warehouse=dataclasses.replace(settings.warehouse, path=str(home / "warehouse"))
    )
    events = the_events()
    write_raw(iso, events)
    backfill(spark, iso, start=DAYS.start, end=DAYS.end, progress=False)
    frame = events.to_pandas()
    counted = frame[(frame["type"] == "event") & ~frame["is_bot"] & (frame["site_id"] == SITE)]
    pairs = [
        {"event_date": r.event_date, "name": r.name, "key": k, "value": v, "visitor_id": r.visitor_id}
        for r in counted.itertuples()
        for k, v in (r.props or [])
    ]
    return {"settings": iso, "truth": pd.DataFrame(pairs)}


def test_the_view_holds_exact_events_per_day_name_key_and_value_of_human_custom_events(
    warehouse: dict[str, Any],
) -> None:
    truth: pd.DataFrame = warehouse["truth"]
    table = view(warehouse["settings"], PROPS_1D.table)
    keys = ["event_date", "name", "key", "value"]
    expected = truth.groupby(keys).agg(events=("visitor_id", "size"), exact=("visitor_id", "nunique")).reset_index()
    found = table.merge(expected, on=keys, how="outer", indicator=True)
    assert set(found["_merge"]) == {"both"}, found[found["_merge"] != "both"].head()
    assert (found["events_x"] == found["events_y"]).all()
    assert not table["value"].isin(["bot-plan", "page-plan"]).any()  # bots and page views do not count
    assert (table["window_start"].dt.date == table["event_date"]).all()
    for row in found.itertuples():
        assert abs(row.visitors - row.exact) <= max(1.0, 0.05 * row.exact), row


def truth_of(truth: pd.DataFrame, key: str, name: str) -> Counter[str]:
    """The fold of tally/props.py computed the plain way: per day, rank keys then values; sum the range."""
    totals: Counter[str] = Counter()
    for _, day in truth.groupby("event_date"):
        per_key = Counter(day["key"])
        kept = sorted(per_key, key=lambda k: (-per_key[k], k))[:MAX_KEYS_PER_DAY]
        if key not in kept:
            continue
        values = Counter(day[(day["key"] == key) & (day["name"] == name)]["value"])
        top = set(sorted(values, key=lambda v: (-values[v], v))[:MAX_VALUES_PER_KEY])
        for value, events in values.items():
            totals[value if value in top else OTHER_VALUE] += events
    return totals


def test_props_fold_values_past_the_cap_into_other_and_estimate_visitors_within_the_bound(
    warehouse: dict[str, Any],
) -> None:
    truth: pd.DataFrame = warehouse["truth"]
    agg = Aggregates(warehouse["settings"])
    frame = props(agg, SITE, DAYS, "order", name="purchase", limit=15)
    expected = truth_of(truth, "order", "purchase")
    assert expected[OTHER_VALUE] > 0, "the events must put values past the cap"
    named = sorted((v for v in expected if v != OTHER_VALUE), key=lambda v: (-expected[v], v))[:15]
    assert frame["value"].tolist() == [*named, OTHER_VALUE]
    assert frame["events"].tolist() == [expected[v] for v in [*named, OTHER_VALUE]]
    orders = truth[truth["key"] == "order"]
    for row in frame[frame["value"] != OTHER_VALUE].itertuples():
        exact = orders.loc[orders["value"] == row.value, "visitor_id"].nunique()
        assert abs(row.visitors - exact) <= max(1, exact * row.visitors_bound), row
    plans = props(agg, SITE, DAYS, "plan")
    assert dict(zip(plans["value"], plans["events"], strict=True)) == dict(
        Counter(truth[truth["key"] == "plan"]["value"])
    )


def test_a_day_keeps_only_its_most_frequent_keys(warehouse: dict[str, Any]) -> None:
    truth: pd.DataFrame = warehouse["truth"]
    keys = property_keys(Aggregates(warehouse["settings"]), SITE, DAYS)
    day_one = truth[truth["event_date"] == DAYS.start]
    assert day_one["key"].nunique() > MAX_KEYS_PER_DAY
    wide = set(keys.loc[keys["name"] == "wide", "key"])
    assert wide == {f"w{k:03d}" for k in range(MAX_KEYS_PER_DAY - 2)}  # `order` and `plan` come first
    assert {"order", "plan"} <= set(keys["key"])
    assert props(Aggregates(warehouse["settings"]), SITE, DAYS, f"w{WIDE_KEYS - 1:03d}").empty
