"""A benchmark run's home is removed when the run returns, but for a live Spark session's scratch
space (removed when the process ends), and kept, and named, when the run fails or asks to keep it:
bench/homes.py."""

from __future__ import annotations

import atexit
import os
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

import pytest

from bench import homes
from bench.homes import SPARK_SCRATCH, in_temporary_home, keep_home, remove_at_exit, spark_scratch_in_use


@pytest.fixture(autouse=True)
def temporary_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def filled(home: Path) -> Path:
    """``home`` as a run leaves it: a warehouse, a log, and a Spark session's scratch space."""
    (home / "warehouse" / "raw").mkdir(parents=True)
    (home / "warehouse" / "raw" / "part-0.parquet").write_bytes(b"x" * 1024)
    (home / "broker.log").write_text("started")
    (home / SPARK_SCRATCH / "tmp").mkdir(parents=True)
    return home


def test_a_run_that_returns_leaves_nothing_of_its_home(temporary_directory: Path) -> None:
    @in_temporary_home("demo")
    def measure(home: Path, quick: bool = False, *, size: int = 1) -> tuple[Path, bool, int]:
        return filled(home), quick, size

    home, quick, size = measure(True, size=3)
    assert (quick, size) == (True, 3), "the run's own arguments pass through"
    assert home.parent == temporary_directory and home.name.startswith("tally-bench-demo-")
    assert not home.exists(), "no Spark session of this process uses its scratch space: all of it goes"


def test_a_live_sessions_scratch_space_stays_until_the_process_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    at_exit: list[tuple[Any, ...]] = []
    monkeypatch.setattr(homes, "spark_scratch_in_use", lambda home: True)
    monkeypatch.setattr(atexit, "register", lambda *call: at_exit.append(call))

    @in_temporary_home("demo")
    def measure(home: Path) -> Path:
        return filled(home)

    home = measure()
    assert sorted(p.name for p in home.iterdir()) == [SPARK_SCRATCH]
    assert at_exit == [(remove_at_exit, home, os.getpid())]
    remove_at_exit(home, os.getpid() + 1)  # a child forked from the process: not its home to remove
    assert home.exists()
    remove_at_exit(home, os.getpid())  # no session is running in this test's process
    assert not home.exists()


def test_the_scratch_space_in_use_is_the_one_the_running_context_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "tally-bench-demo-1"
    conf = {"spark.local.dir": str(home / SPARK_SCRATCH / "tmp")}
    context = types.SimpleNamespace(getConf=lambda: types.SimpleNamespace(get=conf.get))
    pyspark = types.ModuleType("pyspark")
    pyspark.SparkContext = types.SimpleNamespace(_active_spark_context=context)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pyspark", pyspark)
    assert spark_scratch_in_use(home)
    assert not spark_scratch_in_use(tmp_path / "tally-bench-other-2"), "a session started in another home"
    pyspark.SparkContext._active_spark_context = None  # type: ignore[attr-defined]
    assert not spark_scratch_in_use(home), "no context running"


def test_a_run_that_fails_keeps_its_home_and_says_where(capsys: pytest.CaptureFixture[str]) -> None:
    homes_seen: list[Path] = []

    @in_temporary_home("demo")
    def measure(home: Path) -> None:
        homes_seen.append(home)
        (home / "views.log").write_text("the error is in here")
        raise RuntimeError("no beacon in agg.traffic_1m after 600 s")

    with pytest.raises(RuntimeError, match="no beacon"):
        measure()
    assert (homes_seen[0] / "views.log").read_text() == "the error is in here"
    assert str(homes_seen[0]) in capsys.readouterr().out


def test_a_run_that_asks_keeps_its_home_and_says_why(capsys: pytest.CaptureFixture[str]) -> None:
    @in_temporary_home("demo")
    def measure(home: Path) -> Path:
        keep_home(filled(home), "2 client IPs found at rest")
        return home

    home = measure()
    assert (home / "warehouse" / "raw" / "part-0.parquet").exists()
    assert f"{home}: 2 client IPs found at rest" in capsys.readouterr().out


def test_a_home_the_session_cannot_be_asked_about_is_kept(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def gone(home: Path) -> bool:
        raise ConnectionError("the Java gateway is gone")

    monkeypatch.setattr(homes, "spark_scratch_in_use", gone)

    @in_temporary_home("demo")
    def measure(home: Path) -> Path:
        return filled(home)

    home = measure()
    assert (home / "broker.log").exists()
    assert "could not be asked" in capsys.readouterr().out
