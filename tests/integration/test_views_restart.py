"""kill -9 the streaming views mid-batch, restart them, and compare with a backfill.

CI kills the job once; the long variant (``make test-long``) kills the restarted job mid-batch again.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from jobs.backfill import backfill
from ops.processes import Service, Supervisor
from simulator.synthetic import synthetic_events
from tally.settings import Settings
from tally.tables import ACTIVE_5M, EVENTS, SESSIONS, TRAFFIC_1D, TRAFFIC_1H, TRAFFIC_1M, VISITS_1D
from tests.faults.reconcile import view_pageviews
from tests.integration.conftest import wait_for
from tests.integration.views_support import assert_same_rows, isolated_settings, produce, view, write_raw

START = dt.datetime(2026, 2, 3, 9, 0, tzinfo=dt.UTC)
SITE = "demo.tally.local"


def _views_service(iso: Settings) -> Service:
    env = {
        "TALLY_HOME": iso.home,
        "TALLY_KAFKA__PAGEVIEWS_TOPIC": iso.kafka.pageviews_topic,
        "TALLY_WAREHOUSE__PATH": iso.warehouse.path,
        "TALLY_SPARK__METRICS_PORT": "0",
    }
    # The two queries whose views are compared below; the other three have tests of their own.
    queries = ["--query", "traffic", "--query", "sessions"]
    return Service("views-restart", [sys.executable, "-m", "jobs.streaming", *queries], env=env)


def _last_batch(iso: Settings, folder: str) -> int:
    """The traffic query's last batch id in a checkpoint folder (-1 if none)."""
    names = [p.name for p in Path(iso.home, "checkpoints", "traffic", folder).glob("[0-9]*")]
    return max((int(n) for n in names if n.isdigit()), default=-1)


def _batch_in_flight(iso: Settings, after: int) -> bool:
    """A micro-batch later than ``after`` has started and not ended (Spark writes offsets/N when
    a batch starts and commits/N when it ends)."""
    started = _last_batch(iso, "offsets")
    return started > after and started > _last_batch(iso, "commits")


@pytest.mark.parametrize("kills", [pytest.param(1, id="once"), pytest.param(2, id="twice", marks=pytest.mark.long)])
def test_views_killed_mid_batch_and_restarted_equal_a_backfill(
    settings: Settings,
    supervisor: Supervisor,
    kafka: str,
    spark: Any,
    tmp_path_factory: pytest.TempPathFactory,
    kills: int,
) -> None:
    iso = isolated_settings(settings, tmp_path_factory.mktemp("views-restart"))
    events = synthetic_events(visits=400, start=START, span=dt.timedelta(hours=3), site_id=SITE, seed=23)
    rows = events.to_pylist()
    # One part before the first start, then one more part before each kill.
    parts = [rows[i * len(rows) // (kills + 1) : (i + 1) * len(rows) // (kills + 1)] for i in range(kills + 1)]
    produce(iso, parts[0])
    supervisor.start(_views_service(iso))
    try:
        wait_for(lambda: view_pageviews(iso, TRAFFIC_1D.table, SITE) > 0, 180, "the first views")
        killed = -1
        for chunk in parts[1:]:
            produce(iso, chunk)
            # Later than the batch killed last time: the restarted job redoes that one first, so
            # it is "in flight" before the new JVM even runs.
            in_flight = functools.partial(_batch_in_flight, iso, killed)
            wait_for(in_flight, 240, f"a traffic micro-batch after {killed} to start")
            killed = _last_batch(iso, "offsets")
            running = supervisor.find("views-restart")
            assert running is not None, "the views job died by itself; see its log"
            os.killpg(running.pid, signal.SIGKILL)  # the Python driver and its JVM
            wait_for(lambda: supervisor.find("views-restart") is None, 20, "the killed job to be gone")
            supervisor.start(_views_service(iso))
        closer = {**rows[-1], "event_id": "closer", "site_id": "closer.test", "visitor_id": "c"}
        closer_ms = int((START + dt.timedelta(hours=6)).timestamp() * 1000)
        closer.update(event_time=closer_ms, ts_event=closer_ms, ts_sent=closer_ms, ts_received=closer_ms)
        produce(iso, [closer])
        humans = sum(1 for r in rows if r["type"] == "pageview" and not r["is_bot"])
        for table in (TRAFFIC_1D.table, SESSIONS.table, VISITS_1D.table):
            # Sessions close one micro-batch after the watermark passes them, in a query of their own.
            complete = functools.partial(lambda t: view_pageviews(iso, t, SITE) == humans, table)
            # Bounded but generous: each restart replays the roll-up journal of four queries on 2 cores.
            wait_for(complete, 420, f"{humans} page views in {table}")
        # The realtime windows have a roll-up and a journal of their own: every minute is in 5 of them.
        windows = f"5 x {humans} page views in {ACTIVE_5M.table}"
        wait_for(lambda: view_pageviews(iso, ACTIVE_5M.table, SITE) == 5 * humans, 120, windows)
    finally:
        supervisor.stop("views-restart")
    streamed = {
        spec: view(iso, spec.table)
        for spec in (TRAFFIC_1M, TRAFFIC_1H, TRAFFIC_1D, ACTIVE_5M, SESSIONS, EVENTS, VISITS_1D)
    }
    write_raw(iso, events)
    write_raw(iso, pa.Table.from_pylist([{**closer, "event_date": START.date()}], schema=events.schema))
    backfill(spark, iso, start=START.date(), end=START.date(), progress=False)
    for spec, rows_by_stream in streamed.items():
        stream_rows = rows_by_stream[rows_by_stream["site_id"] == SITE]
        batch = view(iso, spec.table)
        assert_same_rows(stream_rows, batch[batch["site_id"] == SITE], spec.keys, spec.table)
    assert Path(iso.home, "checkpoints", "traffic").exists()
