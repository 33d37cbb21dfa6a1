"""A service that dies is started again by the stack itself: kill -9, do nothing else, lose nothing.

The stack is started as a user starts it (``tally up``); the archiver and the streaming views
job are killed together (their whole process groups, SIGKILL) under steady load, once the views
job has committed a micro-batch. Nobody restarts them by hand. The test waits (bounded) until
both run again, then drains and reconciles as the fault tests do: every accepted event is in
Kafka, raw.pageviews and the views, exactly once, and ``tally audit`` exits 0.

Marked ``long`` (``make test-long``): in ``make test``, test_stack_lifecycle kills both under
``tally up`` and checks the watchdog's restarts, and the fault tests reconcile the same kills
under load (0 lost, 0 doubled).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from ops.processes import Supervisor
from ops.stack import stack_env
from tests.faults.load import SteadyLoad
from tests.faults.reconcile import assert_nothing_lost_or_doubled, drain, reconcile
from tests.faults.stack import FaultStack, settings_from
from tests.integration.conftest import wait_for


def views_committed_a_batch(home: Path) -> bool:
    """The traffic query has finished a micro-batch (Spark writes ``commits/N`` when one ends)."""
    return any(p.name.isdigit() for p in (home / "checkpoints" / "traffic" / "commits").glob("[0-9]*"))


def kill9(stack: FaultStack, name: str) -> int:
    """SIGKILL a service's whole process group (driver and JVM for the views job); return its PID."""
    pid = stack.running(name).pid
    os.killpg(pid, signal.SIGKILL)  # each service is its own session: pgid == pid
    return pid


def running_again(stack: FaultStack, name: str, killed_pid: int) -> bool:
    found = stack.supervisor.find(name)
    return found is not None and found.pid != killed_pid


@pytest.mark.long
def test_a_killed_archiver_and_views_job_come_back_by_themselves_and_nothing_is_lost(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = stack_env(home) | {"TALLY_INGEST__WORKERS": "1"}
    with settings_from(env) as settings:
        stack = FaultStack(home, env, settings, Supervisor(settings.home_dir))
    try:
        up = stack.tally("up")
        assert up.returncode == 0, up.stderr
        with SteadyLoad(stack.ingest_url, stack.site, rate=10) as load:
            wait_for(lambda: views_committed_a_batch(home), 300, "the views job's first micro-batch")
            killed = {name: kill9(stack, name) for name in ("archiver", "views")}
            wait_for(
                lambda: all(running_again(stack, name, pid) for name, pid in killed.items()),
                60,
                f"the archiver and the views job (killed: {killed}) to be restarted by the stack",
            )
            before = load.accepted_so_far()
            wait_for(lambda: load.accepted_so_far() > before + 20, 60, "more load after the restarts")
            report = load.stop()
        drain(stack, report, timeout=300)
        result = reconcile(stack, report)
        print(f"\nreconciliation: {result.summary()}")
        assert_nothing_lost_or_doubled(result, report)
        status = stack.tally("status").stdout.splitlines()
        for name in killed:
            row = next(line.split() for line in status if line.startswith(name))
            assert row[1] == "running" and row[4] == "1", f"`tally status` should show 1 restart of {name}: {row}"
    finally:
        down = stack.tally("down")
    assert down.returncode == 0, down.stderr
    assert stack.supervisor.find("archiver") is None and stack.supervisor.find("views") is None
