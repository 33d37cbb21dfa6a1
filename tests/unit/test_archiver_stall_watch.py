"""When the archiver replaces its Kafka consumer: only after two checks in a row find Kafka
behind the raw tables with no message in between (the real replacement: tests/integration/test_archiver.py)."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError, KafkaException

from archiver.stall import StallWatch


class _Clock:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_check_is_due_only_after_the_idle_time_and_not_more_often_than_every() -> None:
    watch = StallWatch(after=3600, every=0)
    assert not watch.due()  # a message (the start) came just now
    watch = StallWatch(after=0, every=3600)
    assert watch.due()
    watch.behind(0)
    assert not watch.due()  # checked just now


def test_kafka_behind_twice_in_a_row_replaces_the_consumer_once() -> None:
    watch = StallWatch(after=0, every=0)
    assert not watch.behind(12)  # may be a message that arrived just before the check
    assert watch.behind(12)
    assert not watch.behind(12), "the count starts over after a replacement"
    assert watch.behind(12)


def test_a_message_or_a_caught_up_check_in_between_clears_the_suspicion() -> None:
    watch = StallWatch(after=0, every=0)
    assert not watch.behind(5)
    watch.fetched()
    assert not watch.behind(5)
    assert not watch.behind(0)
    assert not watch.behind(5)
    assert watch.behind(5)


def test_a_replacement_restarts_the_idle_clock() -> None:
    clock = _Clock()
    watch = StallWatch(after=60, every=0, clock=clock)
    clock.now += 120
    assert watch.due()
    watch.behind(1)
    assert watch.behind(1)
    assert not watch.due() and watch.idle() < 60


def test_checks_are_spaced_by_every_seconds_on_the_watchs_clock() -> None:
    clock = _Clock()
    watch = StallWatch(after=10, every=5, clock=clock)
    clock.now += 10
    assert watch.due()
    watch.behind(3)
    clock.now += 4.9
    assert not watch.due()
    clock.now += 0.1
    assert watch.due()


def test_a_check_asks_kafka_and_replaces_on_the_second_answer_behind() -> None:
    answers = iter([7, 7])
    watch = StallWatch(after=0, every=0)
    assert not watch.check(lambda: next(answers))
    assert watch.check(lambda: next(answers))


def test_kafka_not_answering_counts_as_nothing_behind(caplog: pytest.LogCaptureFixture) -> None:
    def unreachable() -> int:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "no answer"))

    caplog.set_level(logging.INFO, logger="tally.archiver")
    watch = StallWatch(after=0, every=0)
    assert not watch.check(lambda: 7)  # suspected
    assert not watch.check(unreachable)  # cleared: the broker is away, not the consumer stuck
    assert not watch.check(lambda: 7)
    assert [r.getMessage() for r in caplog.records] == ["kafka unreachable, waiting"]
