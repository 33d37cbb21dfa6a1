"""Questions answered from raw events run in worker processes, one a slot of the raw budget.

Why processes: in threads of the API process, a second key's simple raw question took p95 4,837 ms
while one key kept six heavy 400-day questions outstanding, against 1,729 ms alone, though each
question's DuckDB had one thread (``bench.api_budget``, 2026-12-02). DuckDB on one core beside
another did not slow it down; what the two questions shared was the interpreter: the heavy answers'
Python work (a 400-day × 4-dimension result read, sorted and shaped into rows) held the lock the
light question's own Python steps wait for. In a process of its own each question shares only the
machine's cores, which the operating system divides fairly.

:class:`RawWorkers` keeps a pool of ``api.raw_slots`` processes (started when first needed, then
kept warm, each with one :class:`query.sources.Sources` of its own, and each ending within a second
of the API process's end); the budget
(:mod:`api.budget`) already lets no more than that many questions run at once, so a question
never waits for a worker. A question's slot limits (DuckDB's memory and threads) go with it. A
worker that dies (killed, out of memory) fails the questions it held with :class:`WorkerLost`
(the caller's 503) and the pool is started again for the next one.

What crosses to a worker and back is pickled: the parsed :class:`query.spec.Query` and the
current settings (sites added at runtime included) go, an :class:`query.engine.Answer` or the
question's exception comes back.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from query.engine import Answer, run
from query.raw_events import slot_limited
from query.sources import Sources
from query.spec import Query
from tally.log import kv, setup_logging
from tally.settings import Settings

log = logging.getLogger("tally.api.raw_workers")


class WorkerLost(Exception):
    """The worker process answering a question stopped before it answered (killed, or out of memory)."""


class RawWorkers:
    """A pool of ``processes`` worker processes for raw questions (``spawn``: nothing of the API
    process's threads or sockets is copied into them)."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def answer(self, query: Query, settings: Settings, *, memory: str, threads: int) -> Answer:
        """``query`` answered in a worker with DuckDB's ``memory`` limit and ``threads``; raises what
        the question raises there (:class:`query.spec.QueryError` …), :class:`WorkerLost` if the worker died."""
        pool = self._current()
        try:
            return pool.submit(answer_in_worker, query, settings, memory, threads).result()
        except BrokenProcessPool as e:
            self._replace(pool)
            raise WorkerLost("the process answering this question stopped before it answered") from e

    def close(self) -> None:
        """Stop the workers (what they still answer is dropped)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def _current(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                context = multiprocessing.get_context("spawn")
                pool = ProcessPoolExecutor(
                    self.processes, mp_context=context, initializer=start_worker, initargs=(os.getpid(),)
                )
                # Every worker started now, each by a task of its own (a pool starts one whenever a
                # task finds none idle): a worker started later, in the middle of other questions,
                # took a core for its imports (about 1.5 s) from the questions running then.
                for _ in range(self.processes):
                    pool.submit(os.getpid)
                self._pool = pool
                log.info("raw question workers started", extra=kv(processes=self.processes))
            return self._pool

    def _replace(self, broken: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is broken:  # not already replaced by another question that saw it break
                self._pool = None
                log.warning("raw question worker stopped; starting new ones", extra=kv(processes=self.processes))
        broken.shutdown(wait=False, cancel_futures=True)


# One per worker process: its warm table snapshots, given the API's current settings with each question.
_sources: Sources | None = None
ORPHAN_CHECK_S = 1.0  # how often a worker checks that the API process that started it still runs


def start_worker(parent: int) -> None:
    """A worker's start: logs as the API's, and an exit of its own within a second of the API
    process's end, however it ended (killed with -9 too), even in the middle of a question."""
    setup_logging()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(ORPHAN_CHECK_S)
        os._exit(0)  # nobody is left to read its answer

    threading.Thread(target=watch, name="orphan-watch", daemon=True).start()


def answer_in_worker(query: Query, settings: Settings, memory: str, threads: int) -> Answer:
    """In a worker: ``query`` answered as :func:`query.engine.run` answers it, within its slot's limits."""
    global _sources
    if _sources is None:
        _sources = Sources(settings)
    else:
        _sources.settings = settings  # sites may have been added or changed at runtime
    with slot_limited(memory, threads):
        return run(query, _sources)
