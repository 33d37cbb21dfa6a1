import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ops import processes
from ops.processes import Service, Supervisor, idle_policy_available

# A parent that starts a child and both sleep: stopping must end the whole group.
PARENT_WITH_CHILD = [
    sys.executable,
    "-c",
    "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
    "time.sleep(600)",
]


def test_a_service_is_started_once_and_stopped_with_its_children(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path)
    first = supervisor.start(Service("sleeper", PARENT_WITH_CHILD))
    again = supervisor.start(Service("sleeper", PARENT_WITH_CHILD))
    assert again.pid == first.pid
    deadline = time.monotonic() + 10
    while not psutil.Process(first.pid).children() and time.monotonic() < deadline:
        time.sleep(0.1)
    group = [psutil.Process(first.pid), *psutil.Process(first.pid).children(recursive=True)]
    assert len(group) == 2
    assert supervisor.stop("sleeper") is True
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in group)
    assert supervisor.find("sleeper") is None
    assert supervisor.stop("sleeper") is False


def test_a_stale_pid_file_is_not_mistaken_for_a_running_service_and_is_kept_as_a_crash(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path)
    supervisor.run_dir.mkdir(parents=True)
    stale = '{"pid": 1, "created": 0, "port": null, "log": "x", "command": ["x"]}'
    (supervisor.run_dir / "ghost.json").write_text(stale)
    assert supervisor.find("ghost") is None
    assert supervisor.recorded() == ["ghost"]  # the watchdog restarts it; only a stop removes the file
    assert supervisor.stop("ghost") is False
    assert supervisor.recorded() == []


def test_an_unreadable_pid_file_is_removed(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path)
    supervisor.run_dir.mkdir(parents=True)
    (supervisor.run_dir / "ghost.json").write_text('{"pid": 1, "created"')
    assert supervisor.find("ghost") is None
    assert not (supervisor.run_dir / "ghost.json").exists()


def test_a_pid_file_of_an_older_version_reads_as_never_restarted(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path)
    supervisor.run_dir.mkdir(parents=True)
    (supervisor.run_dir / "old.json").write_text('{"pid": 1, "created": 0, "port": 80, "log": "x", "command": []}')
    record = supervisor.record("old")
    assert record is not None and record.restarts == 0 and record.crashes == () and record.gave_up == ""


def test_the_pids_of_the_recorded_services_leave_out_an_unreadable_pid_file(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path)
    supervisor.run_dir.mkdir(parents=True)
    (supervisor.run_dir / "gone.json").write_text(
        '{"pid": 4194304, "created": 0, "port": null, "log": "x", "command": []}'
    )
    (supervisor.run_dir / "torn.json").write_text('{"pid": 1, "created"')
    assert supervisor.pids() == {"gone": 4194304}  # whether its process still runs or not


def test_a_batch_service_runs_niced_with_its_children_under_the_same_pid(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path)
    base = psutil.Process().nice()
    started = supervisor.start(Service("batch", PARENT_WITH_CHILD, nice=7))
    try:
        deadline = time.monotonic() + 10
        while not psutil.Process(started.pid).children() and time.monotonic() < deadline:
            time.sleep(0.1)
        leader = psutil.Process(started.pid)
        assert leader.cmdline()[: len(PARENT_WITH_CHILD)] == PARENT_WITH_CHILD  # nice exec'd it: same PID
        assert leader.nice() == min(base + 7, 19)
        assert [child.nice() for child in leader.children()] == [min(base + 7, 19)]
    finally:
        supervisor.stop("batch")


def test_the_stack_starts_the_views_job_and_the_archiver_niced_and_ingest_not(tmp_path: Path) -> None:
    from ops.stack import services
    from tally.settings import ArchiverSettings, Settings, SparkSettings

    table = services(Settings(home=str(tmp_path), spark=SparkSettings(nice=12), archiver=ArchiverSettings(nice=5)))
    assert (table["views"].nice, table["archiver"].nice, table["ingest"].nice) == (12, 5, 0)
    views = table["views"]
    assert views.argv()[-len(views.command) - 3 :] == ["nice", "-n", "12", *views.command]
    assert table["ingest"].argv() == table["ingest"].command


@pytest.mark.skipif(not idle_policy_available(), reason="SCHED_IDLE is not available on this host")
def test_an_idle_service_and_its_children_run_under_sched_idle_under_the_same_pid(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path)
    started = supervisor.start(Service("batch", PARENT_WITH_CHILD, nice=7, idle=True))
    try:
        deadline = time.monotonic() + 10
        while not psutil.Process(started.pid).children() and time.monotonic() < deadline:
            time.sleep(0.1)
        leader = psutil.Process(started.pid)
        assert leader.cmdline()[: len(PARENT_WITH_CHILD)] == PARENT_WITH_CHILD  # chrt and nice exec'd it
        assert os.sched_getscheduler(leader.pid) == os.SCHED_IDLE
        assert [os.sched_getscheduler(child.pid) for child in leader.children()] == [os.SCHED_IDLE]
    finally:
        supervisor.stop("batch")


def test_where_sched_idle_is_refused_an_idle_service_runs_niced_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes, "idle_policy_available", lambda: False)
    assert Service("batch", ["x"], nice=10, idle=True).argv() == ["nice", "-n", "10", "x"]


def test_the_sched_idle_probe_says_no_when_chrt_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    refused = subprocess.CompletedProcess(["chrt"], 1, b"", b"chrt: failed to set policy: Operation not permitted")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: refused)
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")
    processes.idle_policy_available.cache_clear()
    try:
        assert processes.idle_policy_available() is False
    finally:
        processes.idle_policy_available.cache_clear()


def test_the_stack_starts_the_views_job_and_the_archiver_under_sched_idle_unless_told_not_to(tmp_path: Path) -> None:
    from ops.stack import services
    from tally.settings import ArchiverSettings, Settings, SparkSettings

    table = services(Settings(home=str(tmp_path)))
    assert (table["views"].idle, table["archiver"].idle, table["ingest"].idle) == (True, True, False)
    table = services(
        Settings(
            home=str(tmp_path), spark=SparkSettings(idle_priority=False), archiver=ArchiverSettings(idle_priority=False)
        )
    )
    assert (table["views"].idle, table["archiver"].idle) == (False, False)
