"""agg.vitals_1h from the streaming query and from a backfill, against truths computed here in plain Python.

Vitals beacons (one per page view, a few without INP, some without a scroll depth, some with
no device) and engagement events with scroll depths go beside synthetic traffic to an isolated
Kafka topic, some of them twice (browser retries), and bots send beacons with values that would
show. Only the vitals query runs (the other views are test_views.py's). Its table must equal a
backfill of the same raw events, hold exact band counts and scroll sums per hour, dimension and
value, and a t-digest whose p75 is within the digest's rank bound of the exact p75.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from jobs.backfill import backfill
from jobs.streaming import start
from simulator.synthetic import synthetic_events
from tally.dimensions import ALL, NONE_VALUE
from tally.settings import Settings
from tally.sketches import digest_count, digest_quantiles
from tally.tables import VITALS_1H
from tally.vitals import BANDS, REPORTED_QUANTILE, SCROLL_DEPTH_COLUMN, VITALS, VITALS_DIMENSIONS, VITALS_TYPE
from tests.integration.views_support import assert_same_rows, isolated_settings, produce, view, write_raw

START = dt.datetime(2026, 3, 2, 9, 0, tzinfo=dt.UTC)
SITE = "vitals.tally.local"
MAX_RANK_ERROR = 0.005  # the t-digest's documented bound (docs/ARCHITECTURE.md, tests/unit/test_sketches.py)
Row = dict[str, Any]


def _beacon(pageview: Row, rng: np.random.Generator, *, bot: bool = False) -> Row:
    """A vitals event a few seconds after its page view, with values spread over Google's three bands."""
    at = int(pageview["event_time"]) + int(rng.integers(2_000, 60_000))
    values: Row = {
        "lcp_ms": int(rng.lognormal(np.log(2600), 0.5)),
        "inp_ms": None if rng.random() < 0.15 else int(rng.lognormal(np.log(220), 0.6)),  # no interaction
        "cls": round(float(rng.exponential(0.12)), 4),
        "fcp_ms": int(rng.lognormal(np.log(1900), 0.5)),
        "ttfb_ms": int(rng.lognormal(np.log(850), 0.6)),
        SCROLL_DEPTH_COLUMN: None if rng.random() < 0.2 else int(rng.integers(0, 101)),
    }
    if bot:  # values no human beacon has: a count or a digest that took them in would show
        values = {"lcp_ms": 3_000_000, "inp_ms": 3_000_000, "cls": 999.0, "fcp_ms": 3_000_000, "ttfb_ms": 3_000_000}
        values[SCROLL_DEPTH_COLUMN] = 100
    device = None if rng.random() < 0.05 else pageview["device"]
    return {
        **pageview,
        **values,
        "event_id": uuid.UUID(int=int(rng.integers(0, 2**63))).hex,
        "type": VITALS_TYPE,
        "device": device,
        "is_bot": bot or pageview["is_bot"],
        "load_ms": None,
        "ts_event": at,
        "ts_sent": at,
        "ts_received": at,
        "event_time": at,
        "event_date": dt.datetime.fromtimestamp(at / 1000, dt.UTC).date(),
    }


def the_events() -> pa.Table:
    """Synthetic traffic over three hours, a vitals beacon for most page views, scroll depths on engagement."""
    traffic = synthetic_events(visits=140, start=START, span=dt.timedelta(hours=3), site_id=SITE, seed=28)
    rng = np.random.default_rng(28)
    rows = traffic.to_pylist()
    for row in rows:
        if row["type"] == "engagement" and rng.random() < 0.5:
            row[SCROLL_DEPTH_COLUMN] = int(rng.integers(0, 101))
    beacons = [_beacon(r, rng) for r in rows if r["type"] == "pageview" and rng.random() < 0.9]
    bots = [_beacon(r, rng, bot=True) for r in rows[:12] if r["type"] == "pageview"]
    return pa.Table.from_pylist(rows + beacons + bots, schema=traffic.schema)


def truths(events: pd.DataFrame) -> dict[tuple[Any, ...], Row]:
    """The view computed the plain way: per hour, dimension and value, the human beacons' counts and values."""
    humans = events[~events["is_bot"] & (events["site_id"] == SITE)]
    vitals = humans["type"] == VITALS_TYPE
    scrolled = humans[vitals | (humans["type"] == "engagement")]
    found: dict[tuple[Any, ...], Row] = defaultdict(lambda: {"measured": 0, "scroll": [], "values": defaultdict(list)})
    for kind, frame in (("vitals", humans[vitals]), ("scroll", scrolled)):
        for r in frame.to_dict("records"):
            hour = pd.Timestamp(r["event_time"] // 3_600_000 * 3_600_000, unit="ms", tz="UTC")
            pairs = [(ALL, "")] + [
                (name, NONE_VALUE if pd.isna(r[column]) else r[column]) for name, column in VITALS_DIMENSIONS.items()
            ]
            for dimension, value in pairs:
                truth = found[(hour, dimension, value)]
                if kind == "scroll" and not pd.isna(r[SCROLL_DEPTH_COLUMN]):
                    truth["scroll"].append(int(r[SCROLL_DEPTH_COLUMN]))
                if kind == "vitals":
                    truth["measured"] += 1
                    for v in VITALS:
                        if not pd.isna(r[v.column]):
                            truth["values"][v.name].append(float(r[v.column]))
    return dict(found)


def rank_error(exact_sorted: np.ndarray, estimate: float, q: float) -> float:
    """Distance from q to the empirical CDF at the estimate (any q within a tie's jump is exact)."""
    n = exact_sorted.size
    below = np.searchsorted(exact_sorted, estimate, side="left") / n
    at_or_below = np.searchsorted(exact_sorted, estimate, side="right") / n
    return float(max(0.0, below - q, q - at_or_below))


@pytest.fixture(scope="module")
def tables(
    settings: Settings, kafka: str, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    iso = isolated_settings(settings, tmp_path_factory.mktemp("vitals-view"))
    events = the_events()
    rows = [{**row, "props": dict(row["props"] or [])} for row in events.to_pylist()]
    retried = [r for r in rows if r["type"] == VITALS_TYPE][:10]
    produce(iso, rows + retried)
    job = start(iso, checkpoint_root=str(Path(iso.home) / "checkpoints"), queries=("vitals",))
    try:
        job.process_all_available()
    finally:
        job.stop()
    stream = view(iso, VITALS_1H.table)
    write_raw(iso, events)
    yield {"settings": iso, "stream": stream, "events": events.to_pandas()}


def test_the_stream_computed_vitals_view_equals_a_backfill_of_the_same_raw_events(
    tables: dict[str, Any], spark: Any
) -> None:
    iso: Settings = tables["settings"]
    # The real backfill, writing only this view: the others' equality is test_views.py's.
    backfill(spark, iso, start=START.date(), end=START.date(), progress=False, views=(VITALS_1H,))
    batch = view(iso, VITALS_1H.table)
    assert_same_rows(tables["stream"], batch, VITALS_1H.keys, VITALS_1H.table)


def test_band_counts_and_scroll_depths_are_exact_and_bots_are_left_out(tables: dict[str, Any]) -> None:
    stream: pd.DataFrame = tables["stream"]
    expected = truths(tables["events"])
    found = {(r["window_start"], r["dimension"], r["value"]): r for r in stream.to_dict("records")}
    assert set(found) == set(expected), set(found) ^ set(expected)
    assert {d for _, d, _ in found} == {ALL, *VITALS_DIMENSIONS} and any(v == NONE_VALUE for *_, v in found)
    for key, truth in expected.items():
        row = found[key]
        assert row["measured"] == truth["measured"], key
        assert (row["scroll_depth_count"], row["scroll_depth_sum"]) == (len(truth["scroll"]), sum(truth["scroll"]))
        for v in VITALS:
            bands = [v.band(x) for x in truth["values"][v.name]]
            assert [row[v.band_column(b)] for b in BANDS] == [bands.count(b) for b in BANDS], (key, v.name)
    every = stream[stream["dimension"] == ALL]
    assert (
        every["inp_good"].sum() + every["inp_needs_improvement"].sum() + every["inp_poor"].sum()
        < every["measured"].sum()
    ), "some beacons lack INP: the bands add up to less than the beacons"
    events: pd.DataFrame = tables["events"]
    assert (events["is_bot"] & (events["type"] == VITALS_TYPE)).sum() >= 3, "the bots must send beacons"


def test_the_p75_of_each_digest_is_within_the_t_digest_bound_of_the_exact_p75(tables: dict[str, Any]) -> None:
    expected = truths(tables["events"])
    checked = 0
    for row in tables["stream"].to_dict("records"):
        truth = expected[(row["window_start"], row["dimension"], row["value"])]
        for v in VITALS:
            exact = np.sort(np.asarray(truth["values"][v.name]))
            digest = row[v.digest_column]
            if exact.size == 0:
                assert digest is None, (row["value"], v.name)
                continue
            assert digest_count(digest) == exact.size
            (p75,) = digest_quantiles(digest, [REPORTED_QUANTILE])
            # Below 1/MAX_RANK_ERROR values every value is its own centroid, and a quantile between two
            # of them is interpolated: one rank of the sample is the finest the bound can be.
            bound = max(MAX_RANK_ERROR, 1 / exact.size)
            assert rank_error(exact, p75, REPORTED_QUANTILE) <= bound, (row["value"], v.name, p75, exact)
            checked += 1
    assert checked > 100
