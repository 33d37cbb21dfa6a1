"""The archiver's batch deduplication: vectorised id keys, seen ids per date, and routing."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from confluent_kafka import Message
from deltalake import DeltaTable, write_deltalake

import archiver.dedup
from archiver.batches import BatchBuilder
from archiver.consumed import Consumed
from archiver.consumer import Archiver
from archiver.dedup import SeenIds, day_numbers, id_key, id_keys
from tally.settings import load_settings
from tests.events import page_view

TODAY = dt.date(2026, 11, 23)
DAY = (TODAY - dt.date(1970, 1, 1)).days


def test_the_vectorised_keys_equal_the_one_by_one_keys_for_every_kind_of_id() -> None:
    ids = [str(uuid.uuid4()) for _ in range(50)] + [
        str(uuid.uuid4()).upper(),
        "ffffffff-ffff-ffff-ffff-ffffffffffff",  # the top bit set: a negative int64
        "00000000-0000-0001-8000-000000000000",
        uuid.uuid4().hex,  # no dashes
        "not-a-uuid",
        "",
        "0x000000-0000-0000-0000-000000000000",  # int() would take the 0x; the fast path must not
        "abcdefgh-ijkl-mnop-qrst-uvwxyz012345",
        "12345678-1234-1234",  # as short as a canonical prefix can be
        "12345678-1234-123",
        "é2345678-1234-1234-1234-123456789012",
        "1_345678-1234-1234-1234-123456789012",
    ]
    assert id_keys(pa.array(ids)).tolist() == [id_key(i) for i in ids]


def test_keys_of_a_sliced_or_chunked_column_are_those_of_its_own_ids() -> None:
    ids = [str(uuid.uuid4()) for _ in range(10)]
    column = pa.chunked_array([pa.array(ids[:4]), pa.array(ids[4:])])
    assert id_keys(column).tolist() == [id_key(i) for i in ids]
    assert id_keys(pa.array(ids).slice(3, 4)).tolist() == [id_key(i) for i in ids[3:7]]
    assert id_keys(pa.array([], pa.string())).tolist() == []


def test_an_id_is_new_once_per_date_and_the_first_copy_in_a_batch_wins() -> None:
    seen = SeenIds(2)
    keys = np.array([5, 7, 5, 9, 7], dtype=np.int64)
    days = np.array([DAY, DAY, DAY, DAY, DAY - 1], dtype=np.int32)
    assert seen.admit(keys, days).tolist() == [True, True, False, True, True]
    assert seen.admit(np.array([9, 3, 3], dtype=np.int64), np.full(3, DAY, dtype=np.int32)).tolist() == [
        False,
        True,
        False,
    ]
    assert seen.admit(np.array([], dtype=np.int64), np.array([], dtype=np.int32)).tolist() == []


def test_ids_stay_seen_after_the_newest_ones_are_merged_into_the_day(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archiver.dedup, "MERGE_EVERY", 10)
    seen, rng = SeenIds(2), np.random.default_rng(7)
    batches = [rng.integers(-(2**63), 2**63 - 1, size=6, dtype=np.int64) for _ in range(8)]
    for keys in batches:
        assert seen.admit(keys, np.full(len(keys), DAY, dtype=np.int32)).all()
    every = np.concatenate(batches)
    assert not seen.admit(every, np.full(len(every), DAY, dtype=np.int32)).any()


def test_dates_past_the_horizon_are_forgotten() -> None:
    seen = SeenIds(2)
    key = np.array([1], dtype=np.int64)
    seen.admit(key, np.array([DAY - 3], dtype=np.int32))
    seen.admit(key, np.array([DAY], dtype=np.int32))
    seen.forget_before(TODAY)
    assert seen.admit(key, np.array([DAY - 3], dtype=np.int32)).tolist() == [True]
    assert seen.admit(key, np.array([DAY], dtype=np.int32)).tolist() == [False]


def test_the_ids_of_the_raw_table_within_the_horizon_count_as_seen_after_a_restart(tmp_path: Path) -> None:
    ids = [str(uuid.uuid4()) for _ in range(5)]
    dates = [TODAY, TODAY, TODAY - dt.timedelta(days=1), TODAY - dt.timedelta(days=5), TODAY]
    write_deltalake(str(tmp_path), pa.table({"event_id": ids, "event_date": pa.array(dates, pa.date32())}))
    seen = SeenIds(2)
    assert seen.load(DeltaTable(str(tmp_path)), TODAY) == 4
    again = seen.admit(id_keys(pa.array(ids)), day_numbers(pa.array(dates, pa.date32())))
    assert again.tolist() == [False, False, False, True, False]  # 5 days back is past the horizon


def test_day_numbers_count_days_since_1970() -> None:
    dates = pa.chunked_array([pa.array([TODAY, dt.date(1970, 1, 2)], pa.date32())])
    assert day_numbers(dates).tolist() == [DAY, 1]


def _message(topic: str, partition: int, offset: int, value: bytes) -> Message:
    return Message(topic=topic, partition=partition, offset=offset, value=value)


def test_a_consumed_batch_knows_its_dead_letters_and_the_next_offset_of_each_partition() -> None:
    messages = [
        _message("pageviews", 0, 10, b"a"),
        _message("pageviews.rejected", 0, 3, b"b"),
        _message("pageviews", 1, 7, b"c"),
        _message("pageviews", 0, 11, b"d"),
    ]
    consumed = Consumed.of(messages, "pageviews.rejected")
    assert consumed.dead_letters == [1]
    assert consumed.events() == ([b"a", b"c", b"d"], [0, 1, 0], [10, 7, 11])
    assert consumed.next_offsets() == {("pageviews", 0): 12, ("pageviews.rejected", 0): 4, ("pageviews", 1): 8}


@pytest.fixture
def archiver_over_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Archiver]:
    """An archiver over an empty warehouse; its consumer is never polled (no broker needed)."""
    env = {"TALLY_HOME": str(tmp_path), "TALLY_KAFKA__BOOTSTRAP_SERVERS": "127.0.0.1:9", "TALLY_ENV": "test"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    archiver = Archiver(load_settings())
    archiver.consumer.close()
    yield archiver


class _Archived:
    """An in-memory raw table: how far it holds each (topic, partition) of the log."""

    def __init__(self, next_offsets: dict[tuple[str, int], int]) -> None:
        self.next_offsets = next_offsets

    def next_offset(self, topic: str, partition: int) -> int | None:
        return self.next_offsets.get((topic, partition))


def test_routing_drops_replayed_offsets_and_second_copies_and_rejects_poison() -> None:
    topic, dead_letters = "pageviews", "pageviews.rejected"
    builder = BatchBuilder(
        events_topic=topic,
        rejected_topic=dead_letters,
        raw=_Archived({(topic, 0): 2}),  # offsets 0 and 1 of partition 0 are archived already
        rejected=_Archived({}),
        seen=SeenIds(2),
    )
    events = [page_view("a.com").to_json() for _ in range(4)]
    values = [events[0], events[1], events[2], events[2], b"not json", events[3]]
    messages = [_message(topic, 0, i, v) for i, v in enumerate(values)] + [_message(topic, 1, 0, events[1])]
    batch = builder.route(Consumed.of(messages, dead_letters))
    stored = pa.concat_tables(batch.raw.tables)
    assert stored.column("kafka_offset").to_pylist() == [2, 5, 0]
    assert stored.column("kafka_partition").to_pylist() == [0, 0, 1]  # partition 1's copy of events[1] is new
    assert batch.duplicates == 1
    assert [r["kafka_offset"] for r in batch.rejected.rows] == [4]
    assert batch.raw.next_offsets == {(topic, 0): 6, (topic, 1): 1}


def test_a_message_a_table_holds_already_is_not_routed_again() -> None:
    topic, dead_letters = "pageviews", "pageviews.rejected"
    builder = BatchBuilder(
        events_topic=topic,
        rejected_topic=dead_letters,
        raw=_Archived({}),
        rejected=_Archived({(topic, 0): 1, (dead_letters, 0): 8}),  # the poison at 0 and letters up to 7
        seen=SeenIds(2),
    )
    letter = b'{"not": "a dead letter"}'
    messages = [
        _message(topic, 0, 0, b"not json"),
        _message(topic, 0, 1, b"not json either"),
        _message(dead_letters, 0, 7, letter),
        _message(dead_letters, 0, 8, letter),
    ]
    batch = builder.route(Consumed.of(messages, dead_letters))
    assert [(r["source_topic"], r["kafka_offset"]) for r in batch.rejected.rows] == [(dead_letters, 8), (topic, 1)]
    assert batch.rejected.next_offsets == {(dead_letters, 0): 9, (topic, 0): 2}
    assert batch.raw.count == 0


def test_the_archiver_counts_the_duplicates_of_the_batch_it_routed(archiver_over_nothing: Archiver) -> None:
    archiver = archiver_over_nothing
    event = page_view("a.com").to_json()
    messages = [_message(archiver.events_topic, 0, i, event) for i in range(3)]
    raw, _ = archiver.route(messages)
    assert raw.count == 1
    assert archiver.duplicates == 2


def test_an_event_whose_value_does_not_fit_its_column_is_rejected_not_fatal(archiver_over_nothing: Archiver) -> None:
    archiver = archiver_over_nothing
    topic = archiver.events_topic
    good = page_view("a.com")
    too_wide = json.dumps(dataclasses.asdict(page_view("a.com")) | {"screen_w": 2**40}).encode()
    messages = [_message(topic, 0, 0, good.to_json()), _message(topic, 0, 1, too_wide)]
    raw, rejected = archiver.route(messages)
    assert pa.concat_tables(raw.tables).column("event_id").to_pylist() == [good.event_id]
    assert [r["kafka_offset"] for r in rejected.rows] == [1]
    assert "does not fit" in str(rejected.rows[0]["message"])
