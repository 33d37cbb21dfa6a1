"""A Ctrl-C stops `tally backfill` and leaves each view's dates either as they were or wholly
rewritten: real Spark, Delta and a real SIGINT, sent as a terminal sends it, to the command's whole
process group (PySpark's JVM ignores it; PySpark's own handler in the Python driver cancels the
Spark jobs under way).

The views of three dates are backfilled first. Then more raw events arrive on the first and the
last date (the middle one has none, so each view is replaced in two runs of dates, two commits),
and the command backfills the three dates again. It is interrupted as soon as its first view is
written. Each view's rows of each date must then be those of before, or those a whole backfill of
the new events gives; some of each.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import pandas as pd
import pytest
from deltalake import DeltaTable

from jobs.backfill import backfill
from ops.job_commands import INTERRUPTED
from simulator.synthetic import synthetic_events
from tally.settings import Settings
from tally.tables import BACKFILL_VIEWS, ViewSpec
from tests.integration.views_support import at_home, keyed, view, write_raw

DAYS = [dt.date(2026, 3, 1), dt.date(2026, 3, 2), dt.date(2026, 3, 3)]
WITH_EVENTS = [DAYS[0], DAYS[2]]  # DAYS[1] has none: each view's dates are two runs
SITES = ("a.test", "b.test")
WAIT_S = 300  # a backfill of these few events that takes longer is stuck, not slow

Rows = dict[tuple[ViewSpec, dt.date], dict[tuple[Any, ...], dict[str, Any]]]


def add_events(settings: Settings, seed: int) -> None:
    for i, (day, site) in enumerate((day, site) for day in WITH_EVENTS for site in SITES):
        morning = dt.datetime.combine(day, dt.time(8), dt.UTC)
        events = synthetic_events(visits=150, start=morning, span=dt.timedelta(hours=8), site_id=site, seed=seed + i)
        write_raw(settings, events)


def rows_by_date(settings: Settings) -> Rows:
    """Each view's rows of each date, keyed (sketches as their estimates: ``views_support.view``)."""
    found: Rows = {}
    for spec in BACKFILL_VIEWS:
        frame = view(settings, spec.table)
        dates = pd.to_datetime(frame[spec.partition_by]).dt.date
        for day in WITH_EVENTS:
            found[spec, day] = keyed(frame[dates == day], spec.keys)
    return found


def version(settings: Settings, spec: ViewSpec) -> int:
    return DeltaTable(settings.table_uri(spec.table)).version()


@pytest.fixture(scope="module")
def home(settings: Settings, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    iso = at_home(settings, tmp_path_factory.mktemp("backfill-interrupt"))
    add_events(iso, seed=0)
    backfill(spark, iso, start=DAYS[0], end=DAYS[-1], progress=False)
    before = rows_by_date(iso)
    add_events(iso, seed=100)  # the backfill below changes every view's rows of both dates but the vitals'
    return {"settings": iso, "before": before}


def interrupted_backfill(settings: Settings) -> str:
    """Run `tally backfill` over DAYS, Ctrl-C it once its first view is written; its stderr."""
    env = dict(os.environ) | {"TALLY_HOME": settings.home, "TALLY_WAREHOUSE__PATH": settings.warehouse.path}
    command = [sys.executable, "-m", "tally", "backfill", "--from", str(DAYS[0]), "--to", str(DAYS[-1])]
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    lines: list[str] = []
    written = threading.Event()

    def read_stderr() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)
            if "view backfilled" in line:  # a view's commits are made: the others are under way or to come
                written.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + WAIT_S
        while not written.wait(0.2):
            assert process.poll() is None, "".join(lines[-30:])  # ended before writing a view
            assert time.monotonic() < deadline, "".join(lines[-30:])
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        assert process.wait(WAIT_S) == 130, "".join(lines[-30:])
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    reader.join(10)
    return "".join(lines)


def test_a_ctrl_c_leaves_each_views_dates_as_they_were_or_wholly_rewritten(home: dict[str, Any], spark: Any) -> None:
    iso: Settings = home["settings"]
    before: Rows = home["before"]
    versions = {spec: version(iso, spec) for spec in BACKFILL_VIEWS}
    said = interrupted_backfill(iso)
    assert INTERRUPTED in said
    left = rows_by_date(iso)
    untouched = [spec.table for spec in BACKFILL_VIEWS if version(iso, spec) == versions[spec]]

    backfill(spark, iso, start=DAYS[0], end=DAYS[-1], progress=False)  # the same backfill, whole
    after = rows_by_date(iso)
    for key, rows in left.items():
        assert rows in (before[key], after[key]), f"{key[0].table} {key[1]}: neither as it was nor rewritten"
    changed = [key for key in left if before[key] != after[key]]
    assert len(changed) == 2 * (len(BACKFILL_VIEWS) - 1)  # no vitals beacons: agg.vitals_1h has no rows
    assert any(left[key] == after[key] for key in changed), "no view's date was rewritten before the Ctrl-C"
    old = [key for key in changed if left[key] == before[key]]
    assert old, f"every view's dates were rewritten before the Ctrl-C; views not committed to: {untouched}"
