"""Writes run a few at a time (``write_each``): a backfill chunk's views, ``spark.backfill_views_at_once`` at once."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TypeVar

T = TypeVar("T")


class Stopped(Exception):
    """A write ended early, between its steps, because another write had failed or the writes were
    interrupted (``write_each``'s ``stop``)."""


def write_each(
    items: Sequence[T], write: Callable[[T], None], *, at_once: int, stop: threading.Event | None = None
) -> None:
    """``write`` each item, ``at_once`` at a time, beginning them in order.

    After a failure (or a Ctrl-C) no other write begins, and ``stop`` is set: a write under way
    that checks it between its steps ends there, raising :class:`Stopped`; one that does not runs
    to its end. Once the writes under way have ended, the failure that happened first is raised
    (after a Ctrl-C, its ``KeyboardInterrupt``); ``write`` logs its own, so a later one is not
    lost. ``stop`` is only set here, never read: a caller cannot skip writes with it.
    """
    if at_once < 1:
        raise ValueError(f"at_once must be at least 1, not {at_once}")
    failed = threading.Event()
    failures: list[BaseException] = []  # in the order they happened

    def fail() -> None:
        failed.set()
        if stop is not None:
            stop.set()

    def guarded(item: T) -> None:
        if failed.is_set():
            return
        try:
            write(item)
        except BaseException as e:
            failures.append(e)
            fail()

    with ThreadPoolExecutor(at_once, thread_name_prefix="write") as writers:
        try:
            wait([writers.submit(guarded, item) for item in items])
        except BaseException:  # Ctrl-C included: begin no other write
            fail()
            raise
    if failures:
        raise failures[0]
