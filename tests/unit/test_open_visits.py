"""Visits still open (query/open_visits.py): the site's recent raw events that agg.events does not
hold, sessionised by the views' rule, against a pandas sessionisation of the same events."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from deltalake import DeltaTable, write_deltalake

from query.open_visits import COLUMNS, Tables, Tail, open_event_ids, open_visits
from simulator.synthetic import synthetic_events

SITE = "demo.tally.local"
GAP_MS = 30 * 60_000
NOW = dt.datetime(2026, 3, 2, 0, 40, tzinfo=dt.UTC)  # past, and just after midnight: the tail spans two dates
LONG = Tail(closes=dt.timedelta(hours=6), span=dt.timedelta(hours=6), gap_ms=GAP_MS)  # every event of the two hours


@pytest.fixture
def raw(tmp_path: Path) -> pd.DataFrame:
    """Two hours of synthetic events up to NOW, and a bot's, in a raw table at tmp_path/raw."""
    table = synthetic_events(visits=200, start=NOW - dt.timedelta(hours=2), span=dt.timedelta(hours=2), site_id=SITE)
    table = table.filter(pa.compute.less_equal(table["event_time"], int(NOW.timestamp() * 1000)))
    write_deltalake(str(tmp_path / "raw"), table, partition_by=["event_date"])
    frame = table.to_pandas()
    return frame[~frame["is_bot"].fillna(False)]


def visits_by_pandas(events: pd.DataFrame) -> list[dict[str, Any]]:
    """Each visit (events of one visitor less than the gap apart) with a page view: its events' ids,
    start, page views, entry page and duration."""
    out = []
    for _, mine in events.sort_values(["visitor_id", "event_time", "event_id"]).groupby("visitor_id"):
        starts = mine["event_time"].diff().fillna(GAP_MS) >= GAP_MS
        for _, visit in mine.groupby(starts.cumsum()):
            views = visit[visit["type"] == "pageview"]
            if views.empty:
                continue
            out.append(
                {
                    "ids": set(visit["event_id"]),
                    "start": int(visit["event_time"].min()),
                    "end": int(visit["event_time"].max()),
                    "pageviews": len(views),
                    "entry_page": views.iloc[0]["path"],
                    "duration_ms": int(visit["event_time"].max() - visit["event_time"].min()),
                }
            )
    return out


def closed_table(tmp_path: Path, raw: pd.DataFrame, ids: set[str]) -> ds.Dataset:
    """An agg.events holding the events ``ids`` (the columns the open tail reads), as the views write it."""
    held = raw[raw["event_id"].isin(ids)]
    table = pa.table(
        {
            "site_id": held["site_id"].tolist(),
            "event_id": held["event_id"].tolist(),
            "event_ts": pa.array(pd.to_datetime(held["event_time"], unit="ms", utc=True), pa.timestamp("us", tz="UTC")),
            "event_date": pa.array(pd.to_datetime(held["event_time"], unit="ms", utc=True).dt.date, pa.date32()),
        }
    )
    write_deltalake(str(tmp_path / "events"), table, partition_by=["event_date"])
    return DeltaTable(str(tmp_path / "events")).to_pyarrow_dataset()


def minutes_up_to(newest: int) -> ds.Dataset:
    """An agg.traffic_1m whose newest minute of the site starts at ``newest`` (ms): how far the stream has come."""
    start = pd.Timestamp(newest // 60_000 * 60_000, unit="ms", tz="UTC")
    return ds.dataset(
        pa.table(
            {
                "site_id": [SITE],
                "dimension": ["all"],
                "window_start": pa.array([start], pa.timestamp("us", tz="UTC")),
                "event_date": pa.array([start.date()], pa.date32()),
            }
        )
    )


def found(
    tmp_path: Path, events: ds.Dataset | None, tail: Tail = LONG, minutes: ds.Dataset | None = None
) -> pd.DataFrame:
    dataset = DeltaTable(str(tmp_path / "raw")).to_pyarrow_dataset()
    return open_visits(Tables(dataset, events, minutes), SITE, tail)


def starts(frame: pd.DataFrame) -> list[int]:
    return sorted(int(t.timestamp() * 1000) for t in frame["session_start"])


def test_with_nothing_closed_every_visit_is_open_with_its_start_page_views_and_entry_page(
    tmp_path: Path, raw: pd.DataFrame
) -> None:
    frame = found(tmp_path, None)
    truth = visits_by_pandas(raw)
    assert list(frame.columns) == COLUMNS and len(truth) > 50
    assert starts(frame) == sorted(v["start"] for v in truth)
    by_start = {(int(r.session_start.timestamp() * 1000), r.entry_page): r for r in frame.itertuples()}
    for visit in truth:
        row = by_start[(visit["start"], visit["entry_page"])]
        assert (row.pageviews, row.duration_ms, row.bounce) == (
            visit["pageviews"],
            visit["duration_ms"],
            visit["pageviews"] == 1,
        )


def test_visits_whose_events_agg_events_holds_are_closed_and_left_out(tmp_path: Path, raw: pd.DataFrame) -> None:
    truth = visits_by_pandas(raw)
    cut = int((NOW - dt.timedelta(hours=1)).timestamp() * 1000)
    closed = [v for v in truth if v["end"] < cut]
    assert closed and len(closed) < len(truth)
    events = closed_table(tmp_path, raw, set().union(*(v["ids"] for v in closed)))
    assert starts(found(tmp_path, events)) == sorted(v["start"] for v in truth if v["end"] >= cut)


def test_a_late_event_inside_a_closed_visit_makes_no_visit_and_does_not_reopen_it(
    tmp_path: Path, raw: pd.DataFrame
) -> None:
    truth = visits_by_pandas(raw)
    closed = [v for v in truth if len(v["ids"]) > 1]
    late = {sorted(v["ids"])[0] for v in closed}  # one event of each visit arrived after it closed
    events = closed_table(tmp_path, raw, set().union(*(v["ids"] for v in closed)) - late)
    assert starts(found(tmp_path, events)) == sorted(v["start"] for v in truth if len(v["ids"]) == 1)


def test_only_the_span_before_the_sites_newest_event_is_read(tmp_path: Path, raw: pd.DataFrame) -> None:
    span = dt.timedelta(minutes=20)
    newest = int(raw["event_time"].max())
    recent = raw[raw["event_time"] >= newest - span // dt.timedelta(milliseconds=1)]
    assert 0 < len(recent) < len(raw)
    tail = Tail(closes=span, span=span, gap_ms=GAP_MS)
    assert starts(found(tmp_path, None, tail)) == sorted(v["start"] for v in visits_by_pandas(recent))


def test_a_visit_whose_last_event_is_older_than_the_views_close_one_is_not_open(
    tmp_path: Path, raw: pd.DataFrame
) -> None:
    # Its events are not in agg.events, yet the views closed it: they were dropped as late (a backfill counts them).
    closes = dt.timedelta(minutes=40)
    newest = int(raw["event_time"].max()) // 60_000 * 60_000  # the start of the stream's newest minute
    truth = visits_by_pandas(raw)
    recent = [v for v in truth if v["end"] >= newest - closes // dt.timedelta(milliseconds=1)]
    assert 0 < len(recent) < len(truth)
    tail = Tail(closes=closes, span=LONG.span, gap_ms=GAP_MS)
    assert starts(found(tmp_path, None, tail, minutes_up_to(newest))) == sorted(v["start"] for v in recent)
    # Before the stream has counted a minute of the site, it has closed nothing: every visit is open.
    assert starts(found(tmp_path, None, tail)) == sorted(v["start"] for v in truth)


def test_a_site_without_events_has_no_open_visits(tmp_path: Path, raw: pd.DataFrame) -> None:
    dataset = DeltaTable(str(tmp_path / "raw")).to_pyarrow_dataset()
    frame = open_visits(Tables(dataset, None, None), "other.example", LONG)
    assert frame.empty and list(frame.columns) == COLUMNS


def test_the_events_of_open_visits_are_those_of_the_visits_not_closed(tmp_path: Path, raw: pd.DataFrame) -> None:
    truth = visits_by_pandas(raw)
    cut = int((NOW - dt.timedelta(hours=1)).timestamp() * 1000)
    closed = [v for v in truth if v["end"] < cut]
    events = closed_table(tmp_path, raw, set().union(*(v["ids"] for v in closed)))
    dataset = DeltaTable(str(tmp_path / "raw")).to_pyarrow_dataset()
    found_ids = open_event_ids(Tables(dataset, events, None), SITE, LONG)
    assert found_ids == set().union(*(v["ids"] for v in truth if v["end"] >= cut))
