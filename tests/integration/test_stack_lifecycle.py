"""`tally up` / `status` / `down` as a user runs them: idempotent, and nothing left behind."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil

from ops.processes import Supervisor, port_in_use
from ops.stack import stack_env
from tests.integration.conftest import wait_for

KILLED = ("archiver", "views")
STARTED = {"archiver": "archiver started", "views": "streaming views started"}  # their log lines


def tally(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tally", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def recorded_processes(home: Path) -> list[psutil.Process]:
    """Every live process the PID files name, with all their children."""
    found = []
    for pid in Supervisor(home).pids().values():
        try:
            proc = psutil.Process(pid)
            found += [proc, *proc.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    return found


def logged_since(log: Path, offset: int, line: str) -> bool:
    """``line`` is in ``log`` past its first ``offset`` bytes (a service's start, logged after a restart)."""
    with log.open("rb") as f:
        f.seek(offset)
        return line.encode() in f.read()


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    return [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_up_twice_starts_one_stack_and_down_leaves_nothing(tmp_path: Path) -> None:
    env = stack_env(tmp_path / "home")
    ports = [int(env[k]) for k in ("TALLY_KAFKA__PORT", "TALLY_INGEST__PORT", "TALLY_DASHBOARD__PORT")]
    metrics = [int(env[k]) for k in ("TALLY_ARCHIVER__METRICS_PORT", "TALLY_SPARK__METRICS_PORT")]
    logs = tmp_path / "home" / "logs"
    procs: list[psutil.Process] = []
    try:
        first = tally(env, "up")
        assert first.returncode == 0, first.stderr
        assert "dashboard: http://127.0.0.1:" in first.stdout
        procs += recorded_processes(tmp_path / "home")
        service_pids = Supervisor(tmp_path / "home").pids()
        assert set(service_pids) == {"broker", "ingest", "archiver", "views", "dashboard", "api", "watchdog"}

        second = tally(env, "up")
        assert second.returncode == 0, second.stderr
        assert "already running" in second.stderr
        assert Supervisor(tmp_path / "home").pids() == service_pids  # the same processes, none added

        status = tally(env, "status")
        assert "RESTARTS" in status.stdout.splitlines()[0]
        for service in ("broker", "ingest", "archiver", "views", "dashboard", "api", "watchdog"):
            row = next(line.split() for line in status.stdout.splitlines() if line.startswith(service))
            assert row[1] == "running" and row[4] == "0", row  # STATE, RESTARTS
        assert all(port_in_use(p) for p in ports)

        # kill -9 the archiver and the views job (each its whole process group): the watchdog
        # starts both again by itself, each logs that it runs, and `tally status` counts the
        # restart. That nothing is lost across such a kill is the fault tests' reconciliation
        # (they start the services again by hand) and test_stack_restart's (long).
        offsets = {service: (logs / f"{service}.log").stat().st_size for service in KILLED}
        for service in KILLED:
            os.killpg(service_pids[service], signal.SIGKILL)
        wait_for(
            lambda: all(logged_since(logs / f"{s}.log", offsets[s], STARTED[s]) for s in KILLED),
            240,
            "the archiver and the views job, killed, to be started again by the watchdog and log that they run",
        )
        assert all(Supervisor(tmp_path / "home").pids()[s] != service_pids[s] for s in KILLED)
        status = tally(env, "status")
        for service in KILLED:
            row = next(line.split() for line in status.stdout.splitlines() if line.startswith(service))
            assert row[1] == "running" and row[4] == "1", f"`tally status` should show 1 restart of {service}: {row}"
    finally:
        procs += recorded_processes(tmp_path / "home")  # the restarted ones with their children too
        down = tally(env, "down")
    assert down.returncode == 0, down.stderr
    psutil.wait_procs(procs, timeout=10)
    assert alive(procs) == []
    assert not any(port_in_use(p) for p in ports + metrics)  # the watchdog, stopped first, restarted nothing
    assert "stopped" in tally(env, "status").stdout
    assert not list((tmp_path / "home" / "run").glob("*.json"))


def test_a_taken_port_is_reported_with_what_to_do_and_down_cleans_up(tmp_path: Path) -> None:
    env = stack_env(tmp_path / "home")
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", int(env["TALLY_INGEST__PORT"])))
    squatter.listen()
    try:
        result = tally(env, "up")
        assert result.returncode == 2
        assert "already in use" in result.stderr and "TALLY_" in result.stderr
        assert "Traceback" not in result.stderr
    finally:
        squatter.close()
        procs = recorded_processes(tmp_path / "home")
        tally(env, "down")
    psutil.wait_procs(procs, timeout=10)
    assert alive(procs) == []


def test_a_half_written_kafka_directory_is_refused_with_advice(tmp_path: Path) -> None:
    env = stack_env(tmp_path / "home")
    data = tmp_path / "home" / "kafka" / "data"
    data.mkdir(parents=True)
    (data / "stray.log").write_text("x")
    result = tally(env, "up")
    assert result.returncode == 2
    assert "half-written" in result.stderr and "rm -rf" in result.stderr
    assert not list((tmp_path / "home").glob("run/*.json"))
