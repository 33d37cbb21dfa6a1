"""The watchdog's restart rules: exponential backoff over a sliding window, then a loud give-up."""

from __future__ import annotations

import pytest

from ops.watch_policy import RestartPolicy

POLICY = RestartPolicy(base_delay=1.0, max_delay=10.0, window=300.0, max_crashes=5)


def test_the_first_crash_is_restarted_after_the_shortest_delay() -> None:
    decision = POLICY.on_crash([], now=1000.0)
    assert decision.delay == 1.0 and decision.give_up == "" and decision.recent == (1000.0,)


@pytest.mark.parametrize(("crashes_in_window", "delay"), [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (5, 10.0), (9, 10.0)])
def test_each_crash_in_a_window_doubles_the_delay_up_to_the_maximum(crashes_in_window: int, delay: float) -> None:
    assert POLICY.delay(crashes_in_window) == delay


def test_crashes_older_than_the_window_are_forgotten_so_the_backoff_starts_again() -> None:
    decision = POLICY.on_crash([100.0, 200.0, 300.0, 400.0], now=1000.0)
    assert decision.delay == 1.0 and decision.give_up == "" and decision.recent == (1000.0,)


def test_repeated_fast_crashes_make_it_give_up_and_say_why() -> None:
    decision = POLICY.on_crash([10.0, 20.0, 30.0, 40.0], now=50.0)
    assert decision.give_up == "crashed 5 times within 300s"
    assert decision.recent == (10.0, 20.0, 30.0, 40.0, 50.0)


def test_one_crash_short_of_the_limit_is_still_restarted() -> None:
    decision = POLICY.on_crash([10.0, 20.0, 30.0], now=40.0)
    assert decision.give_up == "" and decision.delay == 8.0


def test_crashes_spread_wider_than_the_window_never_give_up() -> None:
    crashes: list[float] = []
    for now in range(0, 10_000, 100):  # one crash every 100 s: at most 3 inside any 300 s window
        decision = POLICY.on_crash(crashes, now=float(now))
        assert decision.give_up == ""
        crashes = list(decision.recent)


def test_a_policy_with_inverted_delays_is_a_programming_error() -> None:
    with pytest.raises(AssertionError, match="base ≤ max"):
        RestartPolicy(base_delay=5.0, max_delay=1.0)
