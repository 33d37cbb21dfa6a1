"""Stack benchmark: `tally up` until ready, until the first page views are visible, and the
resident memory of each process under steady generated traffic.

Runs a private stack (own home, free ports) and stops it afterwards. Prints its figures.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil
from deltalake import DeltaTable

from bench.homes import in_temporary_home
from bench.report import Figure, print_figures
from ops.processes import Supervisor
from ops.stack import stack_env


def tally(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tally", *args], env={**os.environ, **env}, capture_output=True, text=True, timeout=600
    )


def view_rows(home: Path) -> int:
    try:
        minutes = DeltaTable(str(home / "warehouse" / "agg" / "traffic_1m")).to_pandas()
        return int(minutes[minutes["dimension"] == "all"]["pageviews"].sum())
    except Exception:
        return 0


def is_jvm_fork(exe: str, parent_exe: str | None) -> bool:
    """Whether a process is a JVM's fork that has not run its command yet: it then holds all of the
    JVM's pages (a soak sample counted the views job's 1.1 GiB twice). Tally's JVMs start no JVM."""
    return parent_exe is not None and Path(parent_exe).name == "java" and exe == parent_exe


def members(proc: psutil.Process) -> list[psutil.Process]:
    """A process and its children, but for a JVM's fork caught before it ran its command."""
    exes: dict[int, str] = {}
    out = []
    for member in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            exes[member.pid] = member.exe()
            if member is proc or not is_jvm_fork(exes[member.pid], exes.get(member.ppid())):
                out.append(member)
    return out


def rss_by_service(home: Path) -> dict[str, float]:
    """Resident MiB per running service, each including its children (uvicorn workers, Spark JVM)."""
    out = {}
    for name, pid in Supervisor(home).pids().items():
        total = 0
        with contextlib.suppress(psutil.Error):  # a process may end meanwhile
            for member in members(psutil.Process(pid)):
                with contextlib.suppress(psutil.Error):
                    total += member.memory_info().rss
        if total:
            out[name] = total / 2**20
    return out


def cpu_seconds(process: psutil.Process, *, children: bool = False) -> float:
    """User + system CPU time of a process so far (0 once it has exited), optionally with its children's."""
    total = 0.0
    members = [process]
    with contextlib.suppress(psutil.Error):
        members += process.children(recursive=True) if children else []
    for member in members:
        with contextlib.suppress(psutil.Error):
            times = member.cpu_times()
            total += times.user + times.system
    return total


BUDGETS = {
    "broker": "heap ≈ 1 GiB",
    "ingest": "≤ 150 MiB a worker",
    "archiver": "≤ 400 MiB",
    "views": "Spark driver ≤ 2 GiB",
    "dashboard": "≤ 400 MiB",
}


@in_temporary_home("stack")
def measure(home: Path, quick: bool = False, *, seconds: float | None = None) -> list[Figure]:
    """One run: `tally up` on a private home, then resident memory under generated traffic."""
    seconds = seconds or (20.0 if quick else 60.0)
    env = stack_env(home) | {"TALLY_ENV": ""}  # the default configuration, as `tally up` runs it
    ingest = f"http://127.0.0.1:{env['TALLY_INGEST__PORT']}"
    started = time.monotonic()
    traffic: subprocess.Popen[bytes] | None = None
    try:  # `tally down` also when `tally up` failed or was interrupted half-way
        up = tally(env, "up")
        up_s = time.monotonic() - started
        if up.returncode != 0:
            raise RuntimeError(f"tally up failed:\n{up.stderr[-3000:]}")
        traffic = subprocess.Popen(
            [sys.executable, "-m", "tally", "traffic", "--rate", "20", "--duration", "3600", "--target", ingest],
            env={**os.environ, **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        while view_rows(home) == 0 and time.monotonic() - started < 300:
            time.sleep(0.5)
        visible_s = time.monotonic() - started
        samples: dict[str, list[float]] = {}
        sampled_from = time.monotonic()  # steady state: every service up, views writing
        while time.monotonic() - sampled_from < seconds and traffic.poll() is None:
            for name, mib in rss_by_service(home).items():
                samples.setdefault(name, []).append(mib)
            time.sleep(2)
    finally:
        if traffic is not None:
            traffic.terminate()
        tally(env, "down")
    if not samples:
        raise RuntimeError(f"no memory sample was taken; see the logs under {home / 'logs'}")
    figures = [
        Figure("tally up until every service is ready", up_s, "s", goal="≤ 60 s", note="setup already done"),
        Figure("tally up until the first page views are in agg.traffic_1m", visible_s, "s"),
    ]
    for name, values in samples.items():
        note = f"median of samples every 2 s for {seconds:g} s once views are written, with children, 20 beacons/s"
        figures.append(
            Figure(f"resident memory: {name}", statistics.median(values), "MiB", goal=BUDGETS.get(name, ""), note=note)
        )
    total = sum(statistics.median(v) for v in samples.values())
    figures.append(Figure("resident memory: whole stack", total, "MiB", goal="≤ 4,096 MiB"))
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.stack", description=__doc__)
    parser.add_argument("--seconds", type=float, help="traffic duration while sampling memory (default 60, quick 20)")
    parser.add_argument("--quick", action="store_true", help="a short run (a smoke test)")
    args = parser.parse_args(argv)
    print_figures(measure(args.quick, seconds=args.seconds))


if __name__ == "__main__":
    main()
