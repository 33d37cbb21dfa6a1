"""The bounds of custom properties (tally/props.py), applied by the reader of agg.props_1d.

Rows are written with delta-rs into a temporary warehouse (no Spark): the fold and the reads are
checked against truths computed here by plain sorting.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter, defaultdict

import pandas as pd
import pyarrow as pa
from deltalake import write_deltalake

from query.aggregates import AggregateReport, Aggregates, Range, fold_values, kept_keys, property_keys, props
from tally.props import MAX_KEYS_PER_DAY, MAX_VALUES_PER_KEY, OTHER_VALUE
from tally.settings import Settings
from tally.sketches import sketch_from_ids
from tally.tables import PROPS_1D

SITE = "props.test"
DAY_1, DAY_2 = dt.date(2026, 2, 1), dt.date(2026, 2, 2)
Event = tuple[dt.date, str, dict[str, str], str]  # day, event name, properties, visitor


def write_view(settings: Settings, events: list[Event], site: str = SITE) -> None:
    """agg.props_1d rows of ``events`` as the view computes them (one per day, name, key, value)."""
    groups: dict[tuple[dt.date, str, str, str], list[str]] = defaultdict(list)
    for day, name, properties, visitor in events:
        for key, value in properties.items():
            groups[day, name, key, value].append(visitor)
    rows = []
    for (day, name, key, value), visitors in groups.items():
        start = dt.datetime.combine(day, dt.time(), dt.UTC)
        rows.append(
            {
                "site_id": site,
                "window_start": start,
                "window_end": start + dt.timedelta(days=1),
                "name": name,
                "key": key,
                "value": value,
                "events": len(visitors),
                "visitors_sketch": sketch_from_ids(visitors),
                "event_date": day,
            }
        )
    write_deltalake(
        settings.table_uri(PROPS_1D.table), pa.Table.from_pylist(rows), mode="append", partition_by=["event_date"]
    )


def top(counts: Counter[str], limit: int) -> list[str]:
    """The truth's ranking: most events first, ties by text."""
    return sorted(counts, key=lambda item: (-counts[item], item))[:limit]


def test_a_day_keeps_the_keys_carried_by_the_most_events_over_every_event_name() -> None:
    extra = 5
    rows = pd.DataFrame(
        [
            {"event_date": DAY_1, "name": name, "key": f"k{i:03d}", "events": i + 1}
            for i in range(MAX_KEYS_PER_DAY + extra)
            for name in ("signup", "purchase")
        ]
        + [{"event_date": DAY_2, "name": "signup", "key": "k000", "events": 1}]
    )
    kept = kept_keys(rows)
    assert set(kept.loc[kept["event_date"] == DAY_1, "key"]) == {
        f"k{i:03d}" for i in range(extra, MAX_KEYS_PER_DAY + extra)
    }
    assert list(kept.loc[kept["event_date"] == DAY_2, "key"]) == ["k000"]  # each day is ranked on its own


def test_ties_between_keys_keep_the_key_that_sorts_first() -> None:
    rows = pd.DataFrame(
        [{"event_date": DAY_1, "key": f"k{i:03d}", "events": 1} for i in reversed(range(MAX_KEYS_PER_DAY + 1))]
    )
    assert sorted(kept_keys(rows)["key"]) == [f"k{i:03d}" for i in range(MAX_KEYS_PER_DAY)]


def test_values_past_the_cap_of_a_day_event_and_key_fold_into_other() -> None:
    values = MAX_VALUES_PER_KEY + 3
    rows = pd.DataFrame(
        [
            {"event_date": day, "name": name, "key": "plan", "value": f"v{i:03d}", "events": i + 1}
            for i in range(values)
            for day in (DAY_1, DAY_2)
            for name in ("signup", "purchase")
        ]
        + [{"event_date": DAY_1, "name": "other-event", "key": "plan", "value": "v000", "events": 1}]
    )
    folded = fold_values(rows)
    assert len(folded) == len(rows)  # renamed, not dropped: their events still count in (other)
    for (day, name), group in folded.groupby(["event_date", "name"]):
        expected = (values - MAX_VALUES_PER_KEY) if name != "other-event" else 0
        assert (group["value"] == OTHER_VALUE).sum() == expected, (day, name)
    signup = folded[(folded["event_date"] == DAY_1) & (folded["name"] == "signup")]
    assert set(signup.loc[signup["value"] == OTHER_VALUE, "events"]) == {1, 2, 3}
    assert folded.loc[folded["name"] == "other-event", "value"].tolist() == ["v000"]


def test_props_give_exact_events_and_visitors_within_the_bound_with_other_last(settings: Settings) -> None:
    events: list[Event] = []
    for i in range(MAX_VALUES_PER_KEY + 20):  # values seen by 1..5 visitors each
        events += [(DAY_1, "purchase", {"order": f"o{i:03d}", "plan": "pro"}, f"vis{j}") for j in range(1 + i % 5)]
    events += [(DAY_2, "purchase", {"order": "o000"}, f"vis{j}") for j in range(40)]
    events += [(DAY_1, "signup", {"plan": "free"}, "vis1")]
    write_view(settings, events)
    write_view(settings, [(DAY_1, "purchase", {"order": "elsewhere"}, "x")], site="another.test")

    frame = props(Aggregates(settings), SITE, Range(DAY_1, DAY_2), "order", name="purchase", limit=10)
    assert list(frame.columns) == ["value", "events", "visitors", "visitors_bound"]
    # The truth: day by day, the cap's values by events, the rest folded; then the range adds up.
    truth: Counter[str] = Counter()
    for day in (DAY_1, DAY_2):
        day_counts = Counter(p["order"] for d, _, p, _ in events if d == day and "order" in p)
        kept = set(top(day_counts, MAX_VALUES_PER_KEY))
        for value, count in day_counts.items():
            truth[value if value in kept else OTHER_VALUE] += count
    named = Counter({v: n for v, n in truth.items() if v != OTHER_VALUE})
    assert frame["value"].tolist() == [*top(named, 10), OTHER_VALUE]
    assert dict(zip(frame["value"], frame["events"], strict=True)) == {
        v: truth[v] for v in [*top(named, 10), OTHER_VALUE]
    }
    assert frame.loc[0, "value"] == "o000" and frame.loc[0, "events"] == 40 + 1
    for row in frame.itertuples():
        # Visitor ids: vis0..vis4 on day 1 plus vis0..vis39 on day 2 for o000; a union, not a sum.
        matching = {vis for _, _, p, vis in events if (p.get("order") == row.value or row.value == OTHER_VALUE)}
        if row.value != OTHER_VALUE:
            exact = len(matching)
            assert abs(row.visitors - exact) <= max(1, exact * row.visitors_bound), row
        assert 0 < row.visitors_bound < 0.1


def test_property_keys_list_the_kept_keys_per_event_name_and_the_report_reads_through_them(settings: Settings) -> None:
    write_view(
        settings, [(DAY_1, "signup", {"plan": "pro", "step": "2"}, "a"), (DAY_1, "purchase", {"plan": "x"}, "b")]
    )
    agg = Aggregates(settings)
    keys = property_keys(agg, SITE, Range(DAY_1, DAY_1))
    assert keys.to_dict("records") == [
        {"name": "purchase", "key": "plan", "events": 1},
        {"name": "signup", "key": "plan", "events": 1},
        {"name": "signup", "key": "step", "events": 1},
    ]
    report = AggregateReport(agg, SITE, Range(DAY_1, DAY_1))
    assert report.props("plan")["value"].tolist() == ["pro", "x"]
    assert report.props("plan", name="signup")["events"].tolist() == [1]
    assert report.props("missing").empty and report.property_keys().equals(keys)


def test_an_empty_warehouse_has_no_properties(settings: Settings) -> None:
    agg = Aggregates(settings)
    assert property_keys(agg, SITE, Range(DAY_1, DAY_2)).empty
    assert list(props(agg, SITE, Range(DAY_1, DAY_2), "plan").columns) == [
        "value",
        "events",
        "visitors",
        "visitors_bound",
    ]
