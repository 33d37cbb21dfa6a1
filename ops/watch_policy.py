"""When the watchdog restarts a crashed service, and when it stops trying: pure rules, no I/O.

Restarts back off exponentially (1 s, 2 s, 4 s … up to ``max_delay``), counted over the crashes
of the last ``window`` seconds: a service that then runs quietly for a whole window starts again
from the shortest delay. A service that crashes ``max_crashes`` times within one window is failing
at start, not being unlucky (a bad setting, a full disk, a port taken): restarting it forever only
fills its log, so the watchdog gives up and says so, in its log and in ``tally status``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Decision:
    """What to do about one crash: restart after ``delay`` seconds, or give up (``give_up`` says why)."""

    delay: float
    give_up: str
    recent: tuple[float, ...]  # the crashes still inside the window, this one included, oldest first


@dataclass(frozen=True)
class RestartPolicy:
    """Exponential backoff over the crashes of a sliding window, with a give-up threshold."""

    base_delay: float = 1.0
    max_delay: float = 60.0
    window: float = 300.0
    max_crashes: int = 5

    def __post_init__(self) -> None:
        assert 0 < self.base_delay <= self.max_delay, "restart delays must be positive, base ≤ max"
        assert self.window > 0 and self.max_crashes >= 1, "the give-up window and crash count must be positive"

    def recent(self, crashes: Sequence[float], now: float) -> tuple[float, ...]:
        """The crashes inside the window that ends ``now``, oldest first."""
        return tuple(sorted(t for t in crashes if now - t < self.window))

    def delay(self, crashes_in_window: int) -> float:
        """Seconds to wait before the restart that follows the n-th crash of a window (n ≥ 1)."""
        assert crashes_in_window >= 1, "a delay is asked for after a crash"
        return min(self.max_delay, self.base_delay * 2.0 ** (crashes_in_window - 1))

    def on_crash(self, earlier: Sequence[float], now: float) -> Decision:
        """Decide about a crash at ``now``, given the earlier crash times of the same service."""
        recent = self.recent([*earlier, now], now)
        if len(recent) >= self.max_crashes:
            why = f"crashed {len(recent)} times within {self.window:.0f}s"
            return Decision(delay=0.0, give_up=why, recent=recent)
        return Decision(delay=self.delay(len(recent)), give_up="", recent=recent)
