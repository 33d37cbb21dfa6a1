"""When the archiver replaces its Kafka consumer: only after two checks in a row find Kafka
behind the raw tables with no message in between (the real replacement: tests/integration/test_archiver.py)."""

from __future__ import annotations

from archiver.consumer import StallWatch


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
    watch = StallWatch(after=60, every=0)
    watch.last_message -= 120
    assert watch.due()
    watch.behind(1)
    assert watch.behind(1)
    assert not watch.due() and watch.idle() < 60
