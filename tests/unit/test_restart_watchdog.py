"""The watchdog restarts a service that crashed, leaves a stopped one alone, and gives up loudly."""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from ops.processes import Service, Supervisor
from ops.watch import Watchdog
from ops.watch_policy import RestartPolicy

SLEEPER = Service("sleeper", [sys.executable, "-c", "import time; time.sleep(600)"])
QUITTER = Service("quitter", [sys.executable, "-c", "raise SystemExit(3)"])
POLICY = RestartPolicy(base_delay=1.0, max_delay=8.0, window=300.0, max_crashes=3)


class Clock:
    """A clock the test moves by hand, so backoff delays pass without sleeping."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def supervisor(tmp_path: Path) -> Iterator[Supervisor]:
    sup = Supervisor(tmp_path)
    yield sup
    for name in sup.recorded():
        sup.stop(name)


def kill9(supervisor: Supervisor, name: str) -> int:
    running = supervisor.find(name)
    assert running is not None
    os.killpg(running.pid, signal.SIGKILL)
    psutil.wait_procs([psutil.Process(running.pid)], timeout=10)
    return running.pid


def test_a_killed_service_is_started_again_after_its_backoff(supervisor: Supervisor) -> None:
    clock = Clock()
    watchdog = Watchdog(supervisor, {"sleeper": SLEEPER}, policy=POLICY, clock=clock)
    supervisor.start(SLEEPER)
    killed = kill9(supervisor, "sleeper")

    watchdog.check()  # notices the crash, schedules the restart one second later
    record = supervisor.record("sleeper")
    assert record is not None and record.restart_at == clock.now + 1.0 and supervisor.find("sleeper") is None
    clock.now += 1.0
    watchdog.check()

    again = supervisor.find("sleeper")
    assert again is not None and again.pid != killed
    restarted = supervisor.record("sleeper")
    assert restarted is not None and restarted.restarts == 1 and restarted.restart_at is None


def test_a_stopped_service_is_not_restarted(supervisor: Supervisor) -> None:
    clock = Clock()
    watchdog = Watchdog(supervisor, {"sleeper": SLEEPER}, policy=POLICY, clock=clock)
    supervisor.start(SLEEPER)
    assert supervisor.stop("sleeper")
    for _ in range(3):
        watchdog.check()
        clock.now += 10
    assert supervisor.find("sleeper") is None and supervisor.record("sleeper") is None


def test_a_service_that_keeps_crashing_is_given_up_with_an_error_line(
    supervisor: Supervisor, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    watchdog = Watchdog(supervisor, {"quitter": QUITTER}, policy=POLICY, clock=clock)
    supervisor.start(QUITTER)
    deadline = time.monotonic() + 60
    with caplog.at_level(logging.WARNING, logger="ops.watch"):
        while (record := supervisor.record("quitter")) is not None and not record.gave_up:
            assert time.monotonic() < deadline, f"the watchdog never gave up: {record}"
            watchdog.check()
            clock.now += 1.0
            time.sleep(0.05)
    assert record is not None and record.gave_up == "crashed 3 times within 300s"
    assert record.restarts == 2
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "not restarting it" in errors[0].getMessage()
    assert "exited unexpectedly (exit code 3)" in errors[0].getMessage()
    clock.now += 1000  # a given-up service stays down: only an operator's start clears it
    watchdog.check()
    assert supervisor.find("quitter") is None


def test_a_manual_start_after_a_give_up_begins_a_new_history(supervisor: Supervisor) -> None:
    supervisor.start(SLEEPER)
    record = supervisor.record("sleeper")
    assert record is not None
    kill9(supervisor, "sleeper")
    supervisor.write("sleeper", replace(record, restarts=4, gave_up="crashed 5 times within 300s"))
    supervisor.start(SLEEPER)
    fresh = supervisor.record("sleeper")
    assert fresh is not None and fresh.restarts == 0 and fresh.gave_up == "" and supervisor.find("sleeper")


def test_stopping_the_watchdog_leaves_the_services_it_restarted_running(supervisor: Supervisor) -> None:
    watchdog_like = Service(
        "starter",  # starts a service in its own session, as the watchdog does, then waits
        [
            sys.executable,
            "-c",
            "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],"
            " start_new_session=True); time.sleep(600)",
        ],
    )
    starter = supervisor.start(watchdog_like)
    deadline = time.monotonic() + 10
    while not psutil.Process(starter.pid).children() and time.monotonic() < deadline:
        time.sleep(0.1)
    (service,) = psutil.Process(starter.pid).children()
    assert supervisor.stop("starter", timeout=5)
    assert service.is_running() and service.status() != psutil.STATUS_ZOMBIE
    service.kill()
