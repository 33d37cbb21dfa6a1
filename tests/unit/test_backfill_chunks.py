"""How a backfill splits its dates into Spark jobs: by the events the driver's heap holds."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest

from jobs.backfill import EVENTS_PER_GIB, chunk_events, date_chunks
from jobs.spark import AUTO_HEAP_MIB, batch_driver_memory, jvm_size_bytes
from tally.settings import Settings, load_settings

JAN = [dt.date(2026, 1, d) for d in range(1, 11)]
GIB = 2**30


def spark_settings(**changes: Any) -> Settings:
    settings = load_settings()
    return dataclasses.replace(settings, spark=dataclasses.replace(settings.spark, **changes))


def test_dates_go_together_while_their_events_fit() -> None:
    million = dict.fromkeys(JAN, 1_000_000)
    assert date_chunks(JAN[0], JAN[-1], million, max_events=12_000_000, max_days=31) == [(JAN[0], JAN[-1])]
    assert date_chunks(JAN[0], JAN[-1], million, max_events=3_000_000, max_days=31) == [
        (JAN[0], JAN[2]),
        (JAN[3], JAN[5]),
        (JAN[6], JAN[8]),
        (JAN[9], JAN[9]),
    ]
    assert date_chunks(JAN[0], JAN[3], million, max_events=12_000_000, max_days=2) == [
        (JAN[0], JAN[1]),
        (JAN[2], JAN[3]),
    ]


def test_a_date_over_the_budget_is_a_job_of_its_own_and_dates_without_events_cost_nothing() -> None:
    events = {JAN[1]: 5_000_000, JAN[3]: 1}
    assert date_chunks(JAN[0], JAN[4], events, max_events=2_000_000, max_days=31) == [
        (JAN[0], JAN[0]),
        (JAN[1], JAN[1]),
        (JAN[2], JAN[4]),
    ]


def test_without_file_statistics_only_the_dates_bound_a_job() -> None:
    assert date_chunks(JAN[0], JAN[4], None, max_events=1, max_days=2) == [
        (JAN[0], JAN[1]),
        (JAN[2], JAN[3]),
        (JAN[4], JAN[4]),
    ]
    assert date_chunks(JAN[0], JAN[0], None, max_events=1, max_days=0) == [(JAN[0], JAN[0])]


@pytest.mark.parametrize(
    ("text", "size"), [("1536m", 1536 * 2**20), ("6g", 6 * GIB), ("6G", 6 * GIB), ("512k", 512 * 1024), ("100", 100)]
)
def test_jvm_sizes_read_as_spark_takes_them(text: str, size: int) -> None:
    assert jvm_size_bytes(text) == size


def test_a_memory_size_that_is_not_one_says_how_to_write_it() -> None:
    with pytest.raises(ValueError, match="use a number with k, m, g or t"):
        jvm_size_bytes("lots")


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
