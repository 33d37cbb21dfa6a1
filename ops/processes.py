"""Start, find and stop Tally's own OS processes, by PID files under ``<home>/run``.

Each service runs in its own session (process group), so stopping it ends its children too
(uvicorn workers, Spark's JVM) and nothing else on the machine. A PID file records the
process's start time, so a recycled PID is never mistaken for ours.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil


@dataclass(frozen=True)
class Service:
    """One process of the stack: how to run it and how to tell that it is ready."""

    name: str
    command: list[str]
    port: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    ready: Callable[[], bool] | None = None
    ready_timeout: float = 90.0


@dataclass(frozen=True)
class Running:
    name: str
    pid: int
    port: int | None
    log: Path


class ProcessError(RuntimeError):
    """A service could not be started or stopped; the message says what to do."""


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


class Supervisor:
    """Tracks services through PID files in ``run_dir``, logs in ``log_dir``."""

    def __init__(self, home: Path) -> None:
        self.run_dir = home / "run"
        self.log_dir = home / "logs"

    def _pid_file(self, name: str) -> Path:
        return self.run_dir / f"{name}.json"

    def find(self, name: str) -> Running | None:
        """The running instance of a service, or None (stale PID files are removed)."""
        path = self._pid_file(name)
        try:
            record = json.loads(path.read_text())
            proc = psutil.Process(record["pid"])
            if abs(proc.create_time() - record["created"]) < 1.0 and proc.status() != psutil.STATUS_ZOMBIE:
                return Running(name, record["pid"], record.get("port"), Path(record["log"]))
        except (FileNotFoundError, json.JSONDecodeError, KeyError, psutil.Error):
            pass
        path.unlink(missing_ok=True)
        return None

    def start(self, service: Service) -> Running:
        """Start a service unless it already runs; wait until it is ready."""
        running = self.find(service.name)
        if running:
            return running
        if service.port is not None and _port_stays_taken(service.port):
            raise ProcessError(
                f"{service.name}: port {service.port} on 127.0.0.1 is already in use by another process. "
                f"Stop that process, or choose another port in conf/tally.yaml (or its TALLY_* variable)."
            )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{service.name}.log"
        with open(log_path, "ab") as log_file:
            proc = subprocess.Popen(
                service.command,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **service.env},
                start_new_session=True,
            )
        created = psutil.Process(proc.pid).create_time()
        record = {
            "pid": proc.pid,
            "created": created,
            "port": service.port,
            "log": str(log_path),
            "command": service.command,
        }
        self._pid_file(service.name).write_text(json.dumps(record))
        running = Running(service.name, proc.pid, service.port, log_path)
        self._wait_ready(service, proc, log_path)
        return running

    def _wait_ready(self, service: Service, proc: subprocess.Popen[bytes], log_path: Path) -> None:
        if service.ready is None:
            return
        deadline = time.monotonic() + service.ready_timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self._pid_file(service.name).unlink(missing_ok=True)
                raise ProcessError(
                    f"{service.name} exited with code {proc.returncode}; see {log_path}:\n" + _tail(log_path)
                )
            if service.ready():
                return
            time.sleep(0.5)
        raise ProcessError(f"{service.name} was not ready after {service.ready_timeout:.0f}s; see {log_path}")

    def stop(self, name: str, timeout: float = 20.0) -> bool:
        """Stop a service and every process in its group: SIGTERM, then SIGKILL. True if it ran."""
        running = self.find(name)
        if running is None:
            return False
        try:
            group = [psutil.Process(running.pid), *psutil.Process(running.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            group = []
        _signal_group(running.pid, signal.SIGTERM)
        _, alive = psutil.wait_procs(group, timeout=timeout)
        if alive:
            _signal_group(running.pid, signal.SIGKILL)
            for proc in alive:
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.kill()
            psutil.wait_procs(alive, timeout=5)
        self._pid_file(name).unlink(missing_ok=True)
        return True


def _port_stays_taken(port: int, grace_s: float = 5.0) -> bool:
    """True if the port is still taken after a short grace: a just-killed process of ours can
    hold its sockets for a moment while its threads are torn down."""
    deadline = time.monotonic() + grace_s
    while port_in_use(port):
        if time.monotonic() > deadline:
            return True
        time.sleep(0.2)
    return False


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)  # the service's own session: pgid == its pid


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
