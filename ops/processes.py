"""Start, find and stop Tally's own OS processes, by PID files under ``<home>/run``.

Each service runs in its own session (process group), so stopping it ends its children too
(uvicorn workers, Spark's JVM) and nothing else on the machine. A PID file records the
process's start time, so a recycled PID is never mistaken for ours.

A PID file is also the record of intent: it exists from ``start`` until ``stop``. A PID file
whose process is gone is therefore a crash (``stop`` removes the file *before* it signals), which
is what the watchdog (:mod:`ops.watch`) restarts; the file also keeps the restart history that
``tally status`` shows. Every change to a PID file holds that service's lock, so a restart by
the watchdog never races a ``tally up``, ``tally down`` or ``tally forget``.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import psutil

from ops.private_home import PRIVATE_UMASK
from tally.log import kv

log = logging.getLogger("tally.ops.processes")


@dataclass(frozen=True)
class Service:
    """One process of the stack: how to run it and how to tell that it is ready."""

    name: str
    command: list[str]
    port: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    ready: Callable[[], bool] | None = None
    ready_timeout: float = 90.0
    nice: int = 0  # CPU niceness to start it with: batch services yield the cores to ingest
    idle: bool = False  # start it under SCHED_IDLE (where supported): it runs only on a core nobody else wants

    def argv(self) -> list[str]:
        """The command line to start: under util-linux ``chrt --idle`` and coreutils ``nice`` (each execs
        the next, so the service keeps the PID) when asked and available. Children inherit both."""
        prefix: list[str] = []
        if self.idle and idle_policy_available():
            prefix += ["chrt", "--idle", "0"]
        if self.nice and shutil.which("nice"):
            prefix += ["nice", "-n", str(self.nice)]
        return [*prefix, *self.command]


@functools.cache
def idle_policy_available() -> bool:
    """Whether this host lets an unprivileged process start a command under SCHED_IDLE: Linux, with
    ``chrt``, and no container policy refusing the call. Elsewhere the niceness alone applies."""
    if not hasattr(os, "SCHED_IDLE") or shutil.which("chrt") is None:
        log.warning("SCHED_IDLE is not available here (no chrt or not Linux); batch services run niced only")
        return False
    try:
        probe = subprocess.run(["chrt", "--idle", "0", "true"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        log.warning("SCHED_IDLE probe failed; batch services run niced only", extra=kv(error=str(e)))
        return False
    if probe.returncode != 0:
        log.warning(
            "SCHED_IDLE refused on this host; batch services run niced only",
            extra=kv(error=probe.stderr.decode(errors="replace").strip()[:300]),
        )
        return False
    return True


@dataclass(frozen=True)
class Running:
    name: str
    pid: int
    port: int | None
    log: Path


@dataclass(frozen=True)
class Record:
    """A PID file's content: the process, and the service's restart history since it was started."""

    pid: int
    created: float
    port: int | None
    log: str
    command: list[str]
    restarts: int = 0  # restarts by the watchdog since `tally up` (or the last manual start)
    crashes: tuple[float, ...] = ()  # epoch seconds of recent unexpected exits, newest last
    restart_at: float | None = None  # the watchdog restarts it at this epoch second (backoff)
    gave_up: str = ""  # why the watchdog stopped restarting it; empty while it still tries

    @classmethod
    def parse(cls, text: str) -> Record:
        """A record from its JSON (older PID files without the history fields read as never restarted)."""
        data: dict[str, Any] = json.loads(text)
        data["crashes"] = tuple(data.get("crashes", ()))
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def to_json(self) -> str:
        return json.dumps(asdict(self))


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

    @contextlib.contextmanager
    def lock(self, name: str) -> Iterator[None]:
        """Hold this service's lock (across processes) while its PID file is read and changed."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with open(self.run_dir / f".{name}.lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def record(self, name: str) -> Record | None:
        """The service's PID file, whether its process still runs or not (None: not started, or stopped)."""
        try:
            return Record.parse(self._pid_file(name).read_text())
        except (FileNotFoundError, json.JSONDecodeError, KeyError, TypeError):
            return None

    def recorded(self) -> list[str]:
        """Names of the services with a PID file: started and not stopped (running, crashed or given up)."""
        return sorted(p.stem for p in self.run_dir.glob("*.json"))

    def pids(self) -> dict[str, int]:
        """Name -> PID of each service with a readable PID file, whether its process still runs or not."""
        return {name: record.pid for name in self.recorded() if (record := self.record(name)) is not None}

    def write(self, name: str, record: Record) -> None:
        """Replace a service's PID file (atomically: a reader never sees half a record)."""
        path = self._pid_file(name)
        partial = path.with_suffix(".json.tmp")
        partial.write_text(record.to_json())
        partial.replace(path)

    def find(self, name: str) -> Running | None:
        """The running instance of a service, or None. A PID file whose process is gone is kept:
        it tells the watchdog that the service crashed (see the module docstring)."""
        record = self.record(name)
        if record is None:
            if self._pid_file(name).exists():  # unreadable: nothing can be learnt from it
                self._pid_file(name).unlink(missing_ok=True)
            return None
        if not alive(record):
            return None
        return Running(name, record.pid, record.port, Path(record.log))

    def start(self, service: Service, *, history: Record | None = None, wait: bool = True) -> Running:
        """Start a service unless it already runs; wait until it is ready (``wait``).

        ``history`` carries the restart history over (the watchdog's restarts); a start without it
        begins a new history, as an operator's ``tally up`` after a give-up should.
        """
        with self.lock(service.name):
            running = self.find(service.name)
            if running:
                return running
            proc, running = self._spawn(service, history)
        if wait:
            self._wait_ready(service, proc, running.log)
        return running

    def restart(self, service: Service, crashed: Record) -> Running | None:
        """Start a crashed service again (without waiting for readiness), counting the restart.

        None if its PID file changed meanwhile (stopped, or started by someone else): not ours to start.
        """
        with self.lock(service.name):
            if self.record(service.name) != crashed or alive(crashed):
                return None
            history = replace(crashed, restarts=crashed.restarts + 1)
            return self._spawn(service, history)[1]

    def _spawn(self, service: Service, history: Record | None) -> tuple[subprocess.Popen[bytes], Running]:
        check_port(service)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{service.name}.log"
        with open(log_path, "ab") as log_file:
            proc = subprocess.Popen(
                service.argv(),
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **service.env},
                start_new_session=True,
                umask=PRIVATE_UMASK,  # what the service writes is the user's alone (ops/private_home.py)
            )
        created = psutil.Process(proc.pid).create_time()
        record = Record(proc.pid, created, service.port, str(log_path), service.command)
        if history is not None:
            record = replace(record, restarts=history.restarts, crashes=history.crashes)
        self.write(service.name, record)
        return proc, Running(service.name, proc.pid, service.port, log_path)

    def _wait_ready(self, service: Service, proc: subprocess.Popen[bytes], log_path: Path) -> None:
        if service.ready is None:
            return
        deadline = time.monotonic() + service.ready_timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                with self.lock(service.name):
                    self._pid_file(service.name).unlink(missing_ok=True)  # a failed start is not a crash
                raise ProcessError(
                    f"{service.name} exited with code {proc.returncode}; see {log_path}:\n" + _tail(log_path)
                )
            if service.ready():
                return
            time.sleep(0.5)
        raise ProcessError(f"{service.name} was not ready after {service.ready_timeout:.0f}s; see {log_path}")

    def stop(self, name: str, timeout: float = 20.0) -> bool:
        """Stop a service and every process in its group: SIGTERM, then SIGKILL. True if it ran.

        The PID file goes first, so the watchdog never takes the exit for a crash.
        """
        with self.lock(name):
            running = self.find(name)
            self._pid_file(name).unlink(missing_ok=True)
        if running is None:
            return False
        group = _group_members(running.pid)
        _signal_group(running.pid, signal.SIGTERM)
        _, still = psutil.wait_procs(group, timeout=timeout)
        if still:
            _signal_group(running.pid, signal.SIGKILL)
            for proc in still:
                with contextlib.suppress(psutil.NoSuchProcess):
                    proc.kill()
            psutil.wait_procs(still, timeout=5)
        return True


def alive(record: Record) -> bool:
    """Whether the process a record names still runs (and is that process, not a recycled PID)."""
    try:
        proc = psutil.Process(record.pid)
        return abs(proc.create_time() - record.created) < 1.0 and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _group_members(pid: int) -> list[psutil.Process]:
    """A service and its descendants in its own process group. Not the services the watchdog
    restarted: they are its children, but each in its own session, and must outlive it."""
    try:
        leader = psutil.Process(pid)
        members = [leader, *leader.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
    found = []
    for member in members:
        with contextlib.suppress(ProcessLookupError):
            if os.getpgid(member.pid) == pid:
                found.append(member)
    return found


def check_port(service: Service) -> None:
    """Raise ``ProcessError`` if the service's port is taken by another process (after a short grace)."""
    if service.port is not None and _port_stays_taken(service.port):
        raise ProcessError(
            f"{service.name}: port {service.port} on 127.0.0.1 is already in use by another process. "
            f"Stop that process, or choose another port in conf/tally.yaml (or its TALLY_* variable)."
        )


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
