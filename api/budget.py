"""The budget of questions answered from raw events: how many run at once in one process, and per key.

A raw question (:func:`api.answering.may_read_raw`) reads and sessionises a range's events in a
DuckDB of its own, which may take its slot's memory (``api.raw_memory`` / ``api.raw_slots``) and
``api.raw_threads`` threads. Without a bound, the 40 threads of Starlette's pool each ran one: six 400-day
questions of one key, with four dimensions and a ``matches`` filter, ran at once, each with up to
2 GB. Here at most ``slots`` run at once, at most ``per_key`` of them one key's. A question waits
up to ``wait_seconds`` for a slot (one held is often given back within that: a filtered question
takes about 0.5 s over 90 days of 10M events), then is refused: :class:`NoSlot`, which
:class:`api.answering.Answering` turns into a 429 (the key's share is taken) or a 503 (every slot
is), with ``Retry-After``.

Pure logic, no I/O: what a slot lets a question take is the caller's (``query.raw_events.slot_limited``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

# The Retry-After of a refusal: raw questions take seconds, so one sooner would mostly be refused again.
RETRY_AFTER_S = 5


class NoSlot(Exception):
    """No slot came free within the wait: ``key_share`` if the key's own share is taken (its own
    questions are running), else every slot of the process is."""

    def __init__(self, *, key_share: bool, held: int, slots: int, per_key: int) -> None:
        which = f"its key holds {held} of its {per_key}" if key_share else f"all {slots} are held"
        super().__init__(f"no slot for a raw question: {which}")
        self.key_share = key_share
        self.held = held  # the key's own slots when refused
        self.slots = slots
        self.per_key = per_key
        self.retry_after = RETRY_AFTER_S


class RawBudget:
    """``slots`` raw questions at once in this process, at most ``per_key`` of them one key's."""

    def __init__(self, *, slots: int, per_key: int, wait_seconds: float) -> None:
        assert 1 <= per_key <= slots, "settings refuse api.raw_slots_per_key outside 1..api.raw_slots"
        assert wait_seconds >= 0, "settings refuse a negative api.raw_wait_seconds"
        self.slots = slots
        self.per_key = per_key
        self.wait_seconds = wait_seconds
        self._held: dict[str, int] = {}  # key id -> slots its questions hold (none: not listed)
        self._waiting = 0
        self._changed = threading.Condition()

    def held(self, key_id: str | None = None) -> int:
        """Slots held now: by ``key_id``'s questions, or by every question."""
        with self._changed:
            return self._held.get(key_id, 0) if key_id is not None else sum(self._held.values())

    def waiting(self) -> int:
        """Questions waiting for a slot now."""
        with self._changed:
            return self._waiting

    @contextmanager
    def hold(self, key_id: str) -> Iterator[None]:
        """A slot for one of ``key_id``'s questions while the block runs, given back however it ends;
        :class:`NoSlot` if none comes free within ``wait_seconds``."""
        self._take(key_id)
        try:
            yield
        finally:
            self._give_back(key_id)

    def _take(self, key_id: str) -> None:
        with self._changed:
            self._waiting += 1
            try:
                taken = self._changed.wait_for(lambda: self._free_for(key_id), timeout=self.wait_seconds)
            finally:
                self._waiting -= 1
            if not taken:
                held = self._held.get(key_id, 0)
                raise NoSlot(key_share=held >= self.per_key, held=held, slots=self.slots, per_key=self.per_key)
            self._held[key_id] = self._held.get(key_id, 0) + 1

    def _free_for(self, key_id: str) -> bool:
        return self._held.get(key_id, 0) < self.per_key and sum(self._held.values()) < self.slots

    def _give_back(self, key_id: str) -> None:
        with self._changed:
            left = self._held[key_id] - 1
            if left:
                self._held[key_id] = left
            else:
                del self._held[key_id]  # a key without questions running takes no room
            # Every waiter looks again: the slot given back may be free only for another key's question.
            self._changed.notify_all()
