"""A whole private stack for one fault test: broker, ingest, archiver and streaming views.

Each test gets its own home, ports and broker, so a fault (a stopped broker, a killed process)
touches nothing but this test. Processes are started through :class:`ops.processes.Supervisor`
from :func:`ops.stack.services`, exactly as ``tally up`` starts them, and stopped by PID.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from ops import broker
from ops.processes import Running, Service, Supervisor
from ops.stack import services, stack_env
from tally.settings import Settings, load_settings
from tests.integration.conftest import wait_for
from tests.support.stacks import OnStack

SERVICES = ("broker", "ingest", "archiver", "views")


@contextlib.contextmanager
def settings_from(env: dict[str, str]) -> Iterator[Settings]:
    """Settings as a process started with ``env`` would load them (os.environ restored afterwards)."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield load_settings()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@dataclass
class FaultStack(OnStack):
    """The running services of one test, and the faults that can be done to them."""

    home: Path
    env: dict[str, str]
    settings: Settings
    supervisor: Supervisor

    @property
    def other_site(self) -> str:
        """conf/test.yaml's second site: not the one the fault tests reconcile."""
        return self.settings.sites[1].site_id

    def service(self, name: str) -> Service:
        return services(self.settings, self.env)[name]

    def start(self, name: str) -> Running:
        """Start one service (as ``tally up`` would) and wait until it is ready, if it has a readiness check."""
        if name == "broker":
            broker.ensure_formatted(self.settings)
        running = self.supervisor.start(self.service(name))
        if name == "broker":
            broker.wait_until_ready(self.settings.kafka.servers, timeout=90)
            broker.ensure_topics(self.settings)
        return running

    def running(self, name: str) -> Running:
        found = self.supervisor.find(name)
        assert found is not None, f"{name} is not running; see {self.supervisor.log_dir / (name + '.log')}"
        return found

    def kill9(self, name: str) -> int:
        """SIGKILL a service and its children (its whole process group); return the PID killed."""
        pid = self.running(name).pid
        os.killpg(pid, signal.SIGKILL)  # each service is its own session: pgid == pid
        wait_for(lambda: self.supervisor.find(name) is None, 30, f"the killed {name} (pid {pid}) to be gone")
        return pid

    def ingest_workers(self) -> list[psutil.Process]:
        """uvicorn's worker processes: the ingest parent's children running multiprocessing's spawn."""
        parent = psutil.Process(self.running("ingest").pid)
        workers = []
        for child in parent.children():
            with contextlib.suppress(psutil.Error):
                if "spawn_main" in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                    workers.append(child)
        return workers

    def stop(self, name: str) -> None:
        self.supervisor.stop(name)

    def stop_all(self) -> None:
        for name in reversed(SERVICES):
            self.supervisor.stop(name)

    def tally(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """Run a ``tally`` command against this stack."""
        return subprocess.run(
            [sys.executable, "-m", "tally", *args],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )


@contextlib.contextmanager
def fault_stack(home: Path, *, ingest_workers: int = 1) -> Iterator[FaultStack]:
    """Start broker, ingest, archiver and views on free ports under ``home``; stop them all at the end.

    The views job starts first and is not waited for: Spark takes its time, and it reads the
    topic from the beginning, so load can start at once.
    """
    env = stack_env(home) | {"TALLY_INGEST__WORKERS": str(ingest_workers)}
    with settings_from(env) as settings:
        stack = FaultStack(home, env, settings, Supervisor(settings.home_dir))
    try:
        stack.start("broker")
        stack.start("views")
        stack.start("ingest")
        stack.start("archiver")
        yield stack
    finally:
        stack.stop_all()
