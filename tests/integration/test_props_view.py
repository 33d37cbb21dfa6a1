"""agg.props_1d from a real Spark backfill against truths computed here from the events.

Custom events with properties are in raw.pageviews beside synthetic traffic (a site of their own
in the session's shared ``march`` warehouse, see march_sites.py): one key with more values than
the cap, more keys in a day than the key bound, a bot's event and a page view with properties
(neither counts). The table must hold exact events per day, event name, key and value, and
visitors within their bound; ``props()`` must apply the bounds of ``tally/props.py``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pandas as pd
import pytest

from query.aggregates import Aggregates, Range, property_keys, props
from tally.props import MAX_KEYS_PER_DAY, MAX_VALUES_PER_KEY, OTHER_VALUE
from tally.settings import Settings
from tally.tables import PROPS_1D
from tests.integration.march_sites import PROPS_DAYS, PROPS_EVENTS, PROPS_SITE, WIDE_KEYS
from tests.integration.views_support import view

SITE = PROPS_SITE
DAYS = Range(*PROPS_DAYS)


@pytest.fixture(scope="module")
def warehouse(march: Settings) -> dict[str, Any]:
    frame = PROPS_EVENTS.to_pandas()
    counted = frame[(frame["type"] == "event") & ~frame["is_bot"] & (frame["site_id"] == SITE)]
    pairs = [
        {"event_date": r.event_date, "name": r.name, "key": k, "value": v, "visitor_id": r.visitor_id}
        for r in counted.itertuples()
        for k, v in (r.props or [])
    ]
    return {"settings": march, "truth": pd.DataFrame(pairs)}  # the shared tables, read only


def test_the_view_holds_exact_events_per_day_name_key_and_value_of_human_custom_events(
    warehouse: dict[str, Any],
) -> None:
    truth: pd.DataFrame = warehouse["truth"]
    table = view(warehouse["settings"], PROPS_1D.table)
    table = table[table["site_id"] == SITE]  # the shared warehouse holds other sites' events too
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
