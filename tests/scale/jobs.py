"""Running Tally's jobs as an operator would (separate processes configured by environment) and
reading what they wrote, for the scale-out tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pandas as pd
from deltalake.exceptions import TableNotFoundError

from tally.settings import Settings, load_settings
from tally.sketches import digest_quantiles, union_estimate
from tally.storage import open_table
from tally.tables import ViewSpec
from tests.integration.views_support import assert_same_rows


def tally(env: dict[str, str], *args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    """Run ``python -m tally ARGS`` with ``env`` over this process's environment; fail with its output."""
    done = subprocess.run(
        [sys.executable, "-m", "tally", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, (
        f"tally {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr[-4000:]}"
    )
    return done


def view_rows(settings: Settings, spec: ViewSpec, site: str) -> pd.DataFrame:
    """One site's rows of a view, read with delta-rs wherever the warehouse is; sketches as estimates."""
    frame = open_table(settings, spec.table).to_pandas()
    frame = frame[frame["site_id"] == site]
    if "visitors_sketch" in frame:
        frame["visitors"] = [union_estimate([s]).value for s in frame.pop("visitors_sketch")]
    for column in ("engagement_ms_digest", "load_ms_digest"):
        if column in frame:  # as quantiles: stream and batch may merge centroids in another order
            frame[column.removesuffix("_digest") + "_p50_p90_p99"] = [
                tuple(digest_quantiles(d, [0.5, 0.9, 0.99])) if d is not None else None for d in frame.pop(column)
            ]
    return frame.reset_index(drop=True)


def differences(left: Settings, right: Settings, specs: Sequence[ViewSpec], site: str) -> list[str]:
    """The views on which two warehouses differ (empty when every view holds the same rows)."""
    found = []
    for spec in specs:
        try:
            assert_same_rows(view_rows(left, spec, site), view_rows(right, spec, site), spec.keys, spec.table)
        except (AssertionError, TableNotFoundError) as e:
            found.append(str(e)[:500] or f"{spec.table}: {type(e).__name__}")
    return found


def until_same_views(left: Settings, right: Settings, specs: Sequence[ViewSpec], site: str, timeout: float) -> None:
    """Poll until two warehouses hold the same rows in every view (a running stream catches up)."""
    deadline = time.monotonic() + timeout
    found = differences(left, right, specs, site)
    while found and time.monotonic() < deadline:
        time.sleep(3)
        found = differences(left, right, specs, site)
    assert not found, f"after {timeout:.0f}s the views still differ:\n" + "\n".join(found)


class StreamingJob:
    """``python -m jobs.streaming`` as its own process (as ``tally up`` runs it), stopped by PID."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "jobs.streaming"],
                env={**os.environ, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def check_alive(self) -> None:
        code = self.process.poll()
        assert code is None, f"the streaming job exited with {code}; see {self.log_path}"

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(10)


def eventually(condition: Callable[[], bool], timeout: float) -> bool:
    """Poll ``condition`` every second; whether it held before ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(1)
    return condition()


@contextlib.contextmanager
def environment(env: dict[str, str]) -> Iterator[None]:
    """``env`` in os.environ for the block (settings load from it), restored afterwards."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def settings_for(env: dict[str, str]) -> Settings:
    """Settings as a process started with ``env`` (over this one's environment) loads them."""
    with environment(env):
        return load_settings()
