"""How a backfill splits its dates into Spark jobs: by the events the driver's heap holds."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from jobs.backfill_chunks import (
    EVENTS_PER_GIB,
    UNCOUNTED_CHUNK_DAYS,
    chunk_events,
    date_chunks,
    raw_counts_by_date,
)
from jobs.spark import AUTO_HEAP_MIB, batch_driver_memory, cgroup_memory_limits
from tally.settings import Settings, SettingsError, jvm_size_bytes, load_settings

JAN = [dt.date(2026, 1, d) for d in range(1, 11)]
GIB = 2**30


def spark_settings(**changes: Any) -> Settings:
    settings = load_settings()
    return dataclasses.replace(settings, spark=dataclasses.replace(settings.spark, **changes))


def test_dates_go_together_while_their_events_and_the_day_after_fit() -> None:
    million = dict.fromkeys(JAN, 1_000_000)
    assert date_chunks(JAN[0], JAN[-1], million, max_events=12_000_000, max_days=31) == [(JAN[0], JAN[-1])]
    # A job reads the day after its last date too: three dates and the fourth fill 4M. The last
    # date has no events after it, so the last job takes four dates.
    assert date_chunks(JAN[0], JAN[-1], million, max_events=4_000_000, max_days=31) == [
        (JAN[0], JAN[2]),
        (JAN[3], JAN[5]),
        (JAN[6], JAN[9]),
    ]
    assert date_chunks(JAN[0], JAN[3], million, max_events=12_000_000, max_days=2) == [
        (JAN[0], JAN[1]),
        (JAN[2], JAN[3]),
    ]


def test_a_date_over_the_budget_is_a_job_of_its_own_and_dates_without_events_cost_nothing() -> None:
    events = {JAN[1]: 5_000_000, JAN[3]: 1}
    assert date_chunks(JAN[0], JAN[4], events, max_events=2_000_000, max_days=31) == [
        (JAN[0], JAN[0]),  # the day after it is too heavy to read with it
        (JAN[1], JAN[1]),
        (JAN[2], JAN[4]),
    ]


def test_without_row_counts_only_the_dates_bound_a_job_and_at_most_a_week() -> None:
    assert date_chunks(JAN[0], JAN[4], None, max_events=1, max_days=2) == [
        (JAN[0], JAN[1]),
        (JAN[2], JAN[3]),
        (JAN[4], JAN[4]),
    ]
    week = date_chunks(JAN[0], JAN[-1], None, max_events=1, max_days=31)
    assert week == [(JAN[0], JAN[UNCOUNTED_CHUNK_DAYS - 1]), (JAN[UNCOUNTED_CHUNK_DAYS], JAN[-1])]


def test_raw_counts_come_from_the_delta_log_for_the_dates_asked(tmp_path: Path) -> None:
    settings = dataclasses.replace(
        load_settings(), warehouse=dataclasses.replace(load_settings().warehouse, path=str(tmp_path))
    )
    assert raw_counts_by_date(settings, JAN[0], JAN[-1]) == {}  # nothing written yet
    uri = settings.table_uri("raw.pageviews")
    for day, rows in ((JAN[0], 3), (JAN[1], 2), (JAN[0], 4), (JAN[5], 9)):
        table = pa.table({"event_id": [f"{day}-{i}" for i in range(rows)], "event_date": [day] * rows})
        write_deltalake(uri, table, mode="append", partition_by=["event_date"])
    assert raw_counts_by_date(settings, JAN[0], JAN[2]) == {JAN[0]: 7, JAN[1]: 2}
    write_deltalake(
        uri, pa.table({"event_id": ["x"], "event_date": [JAN[9]]}), mode="append", partition_by=["event_date"]
    )
    assert raw_counts_by_date(settings, JAN[9], JAN[9]) == {JAN[9]: 1}


@pytest.mark.parametrize(
    ("text", "size"), [("1536m", 1536 * 2**20), ("6g", 6 * GIB), ("6G", 6 * GIB), ("512k", 512 * 1024)]
)
def test_jvm_sizes_read_as_spark_takes_them(text: str, size: int) -> None:
    assert jvm_size_bytes(text) == size


@pytest.mark.parametrize("text", ["lots", "100", "AUTO", "1.5g"])
def test_a_driver_memory_that_is_not_a_size_is_refused_and_says_how_to_write_one(text: str) -> None:
    with pytest.raises(SettingsError, match=r"spark.driver_memory \(or auto\): .* use a number with k, m, g or t"):
        spark_settings(driver_memory=text)


@pytest.mark.parametrize(("key", "value"), [("backfill_chunk_days", 0), ("backfill_chunk_events", -1)])
def test_backfill_chunks_must_be_positive(key: str, value: int) -> None:
    with pytest.raises(SettingsError, match=f"spark.{key}: {value} must be"):
        spark_settings(**{key: value})


def test_the_memory_limit_of_a_cgroup_above_the_process_counts(tmp_path: Path) -> None:
    proc = tmp_path / "cgroup"
    proc.write_text("0::/system.slice/tally.service\n")
    service = tmp_path / "fs" / "system.slice" / "tally.service"
    service.mkdir(parents=True)
    (service / "memory.max").write_text("max\n")
    (service.parent / "memory.max").write_text(f"{8 * GIB}\n")
    assert cgroup_memory_limits(proc, tmp_path / "fs") == [8 * GIB]
    proc.write_text("4:memory:/docker/abc\n3:cpu:/\n")
    v1 = tmp_path / "fs" / "memory" / "docker" / "abc"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(f"{2 * GIB}\n")
    assert cgroup_memory_limits(proc, tmp_path / "fs") == [2 * GIB]
    assert cgroup_memory_limits(tmp_path / "absent", tmp_path / "fs") == []


def test_an_auto_heap_is_a_quarter_of_the_memory_within_its_bounds() -> None:
    auto = spark_settings(driver_memory="auto")
    assert batch_driver_memory(auto, memory=24 * GIB) == "6144m"
    assert batch_driver_memory(auto, memory=2 * GIB) == f"{AUTO_HEAP_MIB[0]}m"
    assert batch_driver_memory(auto, memory=256 * GIB) == f"{AUTO_HEAP_MIB[1]}m"
    assert batch_driver_memory(spark_settings(driver_memory="1536m"), memory=24 * GIB) == "1536m"


class _Conf:
    def __init__(self, heap: str) -> None:
        self.heap = heap

    def get(self, key: str, default: str) -> str:
        return self.heap if key == "spark.driver.memory" else default


@dataclasses.dataclass
class _Context:
    heap: str

    def getConf(self) -> _Conf:
        return _Conf(self.heap)


@dataclasses.dataclass
class _Session:
    sparkContext: _Context


def test_a_jobs_events_follow_the_drivers_heap_unless_set() -> None:
    assert chunk_events(_Session(_Context("6g")), spark_settings()) == 6 * EVENTS_PER_GIB  # type: ignore[arg-type]
    assert chunk_events(_Session(_Context("1536m")), spark_settings()) == 3_000_000  # type: ignore[arg-type]
    assert chunk_events(_Session(_Context("6g")), spark_settings(backfill_chunk_events=5)) == 5  # type: ignore[arg-type]
