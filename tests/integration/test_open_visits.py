"""Visits as they happen: before the views have written a visit, the reports count it from raw
events as open (provisional); once the views hold it, the same figures come from them, final.

The last two hours of synthetic events up to now go to a warehouse of their own as the archiver
writes them. No view holds them yet, so every visit is open: the API's figures must equal a pandas
sessionisation of the events and say they are provisional. Then a backfill writes every view (as
the stream does once each visit closes), and the same question must give the same figures from the
views, exact, with no visit left open and none counted twice. Last, new visitors arrive: their
visits count at once beside the closed ones, and an audit of the day holds (``kafka``: the audit
reads the topic too; only its raw = views comparisons are asserted).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql import SparkSession

from jobs.backfill import backfill
from quality.audit import audit, open_visit_event_ids
from quality.findings import RAW_VIEWS, SKETCHES
from query.engine import run
from query.plausible import parse_site_query
from query.sources import Sources
from simulator.synthetic import synthetic_events
from tally.settings import Settings
from tests.integration.views_support import write_raw

SITE = "demo.tally.local"
GAP_MS = 30 * 60_000


@pytest.fixture(params=["UTC", "Asia/Kolkata"])
def recent(
    settings: Settings, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> tuple[Settings, pd.DataFrame]:
    """A warehouse of its own holding the demo site's events of the last two hours, and those events;
    the site's days in UTC, or in a zone whose days begin on a half hour (the zoned reports' path)."""
    home: Path = tmp_path_factory.mktemp("open-visits")
    sites = tuple(dataclasses.replace(s, timezone=request.param) if s.site_id == SITE else s for s in settings.sites)
    iso = dataclasses.replace(
        settings,
        home=str(home),
        warehouse=dataclasses.replace(settings.warehouse, path=str(home / "warehouse")),
        sites=sites,
    )
    now = dt.datetime.now(dt.UTC)
    table = synthetic_events(visits=150, start=now - dt.timedelta(hours=2), span=dt.timedelta(hours=2), site_id=SITE)
    table = table.filter(pc.less_equal(table["event_time"], int(now.timestamp() * 1000)))
    write_raw(iso, table)
    events = table.to_pandas()
    return iso, events[~events["is_bot"].fillna(False)]


def truth(events: pd.DataFrame) -> dict[str, Any]:
    """Visits (with a page view), bounce rate and mean duration by a pandas sessionisation."""
    visits = []
    for _, mine in events.sort_values(["visitor_id", "event_time", "event_id"]).groupby("visitor_id"):
        starts = mine["event_time"].diff().fillna(GAP_MS) >= GAP_MS
        for _, visit in mine.groupby(starts.cumsum()):
            views = int((visit["type"] == "pageview").sum())
            if views:
                visits.append((views, int(visit["event_time"].max() - visit["event_time"].min())))
    return {
        "visits": len(visits),
        "bounce_rate": round(100 * sum(v == 1 for v, _ in visits) / len(visits), 1),
        "visit_duration": round(sum(d for _, d in visits) / len(visits) / 1000),
    }


def ask(iso: Settings, events: pd.DataFrame, **body: Any) -> dict[str, Any]:
    """The question over the site's local dates the events fall on."""
    sources = Sources(iso)
    dates = pd.to_datetime(events["event_time"], unit="ms", utc=True).dt.tz_convert(sources.timezone(SITE)).dt.date
    question = {"site_id": SITE, "date_range": [str(dates.min()), str(dates.max())], **body}
    answer = run(parse_site_query(question, now=dt.datetime.now(dt.UTC), timezone_of=sources.timezone), sources)
    return {"results": answer.results, "meta": answer.meta}


METRICS = ["visits", "bounce_rate", "visit_duration"]


def test_visits_count_from_their_first_event_as_provisional_then_from_the_views_as_final(
    recent: tuple[Settings, pd.DataFrame], spark: SparkSession, kafka: str
) -> None:
    iso, events = recent
    expected = truth(events)
    assert expected["visits"] > 50

    live = ask(iso, events, metrics=METRICS)
    assert dict(zip(METRICS, live["results"][0]["metrics"], strict=True)) == expected
    assert live["meta"]["open_visits"] == expected["visits"]  # no view holds any of them yet
    assert live["meta"]["metrics"]["visits"] == {"exact": True, "provisional": True}
    for metric in ("bounce_rate", "visit_duration"):
        assert live["meta"]["metrics"][metric]["provisional"] is True
        assert live["meta"]["metrics"][metric]["exact"] is False
    entry_live = ask(iso, events, metrics=["visits"], dimensions=["visit:entry_page"])["results"]
    hourly_live = ask(iso, events, metrics=["visits"], dimensions=["time:hour"])["results"]
    assert sum(r["metrics"][0] for r in entry_live) == expected["visits"]

    utc_dates = pd.to_datetime(events["event_time"], unit="ms", utc=True).dt.date
    backfill(spark, iso, start=utc_dates.min(), end=utc_dates.max(), progress=False)  # every visit written, closed

    final = ask(iso, events, metrics=METRICS)
    assert dict(zip(METRICS, final["results"][0]["metrics"], strict=True)) == expected
    assert "open_visits" not in final["meta"]
    assert all(final["meta"]["metrics"][m] == {"exact": True} for m in METRICS)
    assert ask(iso, events, metrics=["visits"], dimensions=["visit:entry_page"])["results"] == entry_live
    assert ask(iso, events, metrics=["visits"], dimensions=["time:hour"])["results"] == hourly_live

    # Then visitors arrive: archived now, in no view yet (the 1-minute view's next batch, their visits
    # open). The closed visits come from the views, the new ones from raw, none twice; and an audit
    # of the day counts the new ones as in flight, not missing.
    now = dt.datetime.now(dt.UTC)
    fresh = synthetic_events(visits=3, start=now - dt.timedelta(seconds=30), span=dt.timedelta(seconds=20), seed=3)
    fresh = fresh.filter(pc.less_equal(fresh["event_time"], int(now.timestamp() * 1000)))
    received = pa.array([int(now.timestamp() * 1000)] * fresh.num_rows, pa.int64())
    fresh = fresh.set_column(fresh.schema.get_field_index("ts_received"), "ts_received", received)
    write_raw(iso, fresh)
    arrived = truth(fresh.to_pandas())["visits"]
    both = ask(iso, pd.concat([events, fresh.to_pandas()]), metrics=["visits"])
    assert both["results"][0]["metrics"] == [expected["visits"] + arrived]
    assert both["meta"]["open_visits"] == arrived

    report = audit(iso, start=utc_dates.min(), end=now.date(), site_id=SITE, now=now, record=False)
    compared = [f for f in report.findings if f.check in (RAW_VIEWS, SKETCHES)]
    assert [f"{f.name} {f.date}: {f.message}" for f in compared if not f.ok] == []
    (flying,) = [f for f in compared if f.name == "page views in flight"]
    assert flying.actual == sum(1 for t in fresh.column("type").to_pylist() if t == "pageview")
    # The fresh visitors' visits are the open ones: agg.events holds every other event.
    archived = pd.concat([events, fresh.to_pandas()], ignore_index=True)
    assert open_visit_event_ids(iso, archived) == set(fresh.column("event_id").to_pylist())
