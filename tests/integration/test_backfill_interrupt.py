"""A Ctrl-C stops `tally backfill` and leaves every view's dates whole: real Spark, Delta and a
real SIGINT, sent as a terminal sends it, to the command's whole process group (PySpark's JVM
ignores it; PySpark's own handler in the Python driver cancels the Spark jobs under way).

The command runs on a warehouse of its own, whose views nothing has written yet, so a view's table
exists only once a write of it has committed. It is interrupted as soon as its first view is written;
then each view that exists must hold exactly the rows a whole backfill of the same dates gives, and
some must not exist yet.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from jobs.backfill import backfill
from ops.job_commands import INTERRUPTED
from tally.settings import Settings
from tally.tables import BACKFILL_VIEWS, ViewSpec
from tests.integration.views_support import assert_same_rows, view, write_raw
from traffic.synthetic import synthetic_events

DAYS = [dt.date(2026, 3, 1), dt.date(2026, 3, 2)]
SITES = ("a.test", "b.test")
WAIT_S = 300  # a backfill of these few events that takes longer is stuck, not slow


def rows_of(settings: Settings, spec: ViewSpec) -> pd.DataFrame | None:
    """The view's rows, sketches as their estimates (``views_support.view``), or None when no write of
    it has committed."""
    if not (Path(settings.table_uri(spec.table)) / "_delta_log").is_dir():
        return None
    return view(settings, spec.table)


@pytest.fixture(scope="module")
def home(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    root = tmp_path_factory.mktemp("backfill-interrupt")
    iso = dataclasses.replace(
        settings, home=str(root), warehouse=dataclasses.replace(settings.warehouse, path=str(root / "warehouse"))
    )
    for seed, (day, site) in enumerate((day, site) for day in DAYS for site in SITES):
        noon = dt.datetime.combine(day, dt.time(10), dt.UTC)
        write_raw(iso, synthetic_events(visits=300, start=noon, span=dt.timedelta(hours=6), site_id=site, seed=seed))
    return iso


def test_a_ctrl_c_stops_the_backfill_and_leaves_each_views_dates_whole(home: Settings, spark: Any) -> None:
    env = dict(os.environ) | {"TALLY_WAREHOUSE__PATH": home.warehouse.path}
    command = [sys.executable, "-m", "tally", "backfill", "--from", str(DAYS[0]), "--to", str(DAYS[-1])]
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    lines: list[str] = []
    writing = threading.Event()

    def read_stderr() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)
            if "view backfilled" in line:  # a view's commit is made: the others are under way or to come
                writing.set()

    reader = threading.Thread(target=read_stderr, daemon=True)
    reader.start()
    try:
        assert writing.wait(WAIT_S), "".join(lines[-30:])
        os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        assert process.wait(WAIT_S) == 130, "".join(lines[-30:])
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    reader.join(10)
    said = "".join(lines)
    assert INTERRUPTED in said
    written = {spec: rows_of(home, spec) for spec in BACKFILL_VIEWS}
    assert any(rows is not None for rows in written.values()), "no view was written before the Ctrl-C"
    assert any(rows is None for rows in written.values()), "every view was written before the Ctrl-C"

    backfill(spark, home, start=DAYS[0], end=DAYS[-1], progress=False)  # the same backfill, whole
    for spec, rows in written.items():
        whole = rows_of(home, spec)
        assert whole is not None, spec.table
        if rows is None:
            continue
        # committed before the Ctrl-C: every date of it, as a whole backfill writes it
        if whole.empty:  # a view these events give no rows (no vitals beacons)
            assert rows.empty, spec.table
        else:
            assert_same_rows(whole, rows, spec.keys, spec.table)
