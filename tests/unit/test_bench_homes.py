"""A benchmark run's home is removed when the run returns, but for a live Spark session's scratch
space, and kept (and named) when the run fails: bench/homes.py."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from bench.homes import SPARK_SCRATCH, in_temporary_home, remove_home, spark_scratch_in_use


@pytest.fixture(autouse=True)
def temporary_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_a_run_that_returns_leaves_nothing_of_its_home(temporary_directory: Path) -> None:
    @in_temporary_home("demo")
    def measure(home: Path, quick: bool = False, *, size: int = 1) -> tuple[Path, bool, int]:
        (home / "warehouse" / "raw").mkdir(parents=True)
        (home / "warehouse" / "raw" / "part-0.parquet").write_bytes(b"x" * 1024)
        (home / "broker.log").write_text("started")
        return home, quick, size

    home, quick, size = measure(True, size=3)
    assert (quick, size) == (True, 3), "the run's own arguments pass through"
    assert home.parent == temporary_directory and home.name.startswith("tally-bench-demo-")
    assert not home.exists()


def test_a_home_whose_spark_scratch_space_a_live_session_uses_keeps_only_that(tmp_path: Path) -> None:
    home = tmp_path / "tally-bench-demo-1"
    (home / SPARK_SCRATCH / "tmp").mkdir(parents=True)
    (home / "warehouse-1000").mkdir()
    (home / "warehouse-1000" / "part-0.parquet").write_bytes(b"x")
    (home / "kafka.log").write_text("started")
    remove_home(home, keep_spark_scratch=True)
    assert sorted(p.name for p in home.iterdir()) == [SPARK_SCRATCH]
    assert (home / SPARK_SCRATCH / "tmp").is_dir()


def test_a_spark_folder_left_by_a_job_in_another_process_is_removed_with_the_home() -> None:
    @in_temporary_home("demo")
    def measure(home: Path) -> Path:
        (home / SPARK_SCRATCH / "tmp").mkdir(parents=True)  # as the stack's views job leaves it
        assert not spark_scratch_in_use(home), "no Spark session in this process uses it"
        return home

    assert not measure().exists()


def test_a_run_that_fails_keeps_its_home_and_says_where(capsys: pytest.CaptureFixture[str]) -> None:
    homes: list[Path] = []

    @in_temporary_home("demo")
    def measure(home: Path) -> None:
        homes.append(home)
        (home / "views.log").write_text("the error is in here")
        raise RuntimeError("no beacon in agg.traffic_1m after 600 s")

    with pytest.raises(RuntimeError, match="no beacon"):
        measure()
    assert (homes[0] / "views.log").read_text() == "the error is in here"
    assert str(homes[0]) in capsys.readouterr().out
