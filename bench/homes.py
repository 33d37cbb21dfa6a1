"""Each benchmark run's home: a directory of its own in the system's temporary directory (its
broker's log, its warehouses, its services' logs), removed when the run ends.

A run that fails keeps its home, and says where, for the logs its error points to; so does a run
that found something in it worth reading (:func:`keep_home`: the soak's client IPs at rest). The
scratch space (``spark/``, ``jobs/spark.py``) of a Spark session this process still runs is kept
until the process ends, when the session is stopped and the rest removed: ``python -m bench``
runs every benchmark in one process, and a session one benchmark starts may serve the ones after.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

SPARK_SCRATCH = "spark"  # under a home: a Spark session's local directory and SQL warehouse
KEEP = "KEPT.txt"  # under a home: why the run kept it (:func:`keep_home`)


def keep_home(home: Path, reason: str) -> None:
    """Keep ``home`` when the run ends, for ``reason`` (written into it, and printed then)."""
    (home / KEEP).write_text(reason + "\n")


def spark_scratch_in_use(home: Path) -> bool:
    """Whether this process runs a Spark context whose local directory is in ``home``."""
    if "pyspark" not in sys.modules:  # never imported: no context (and no import of Spark here)
        return False
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    local_dir = context.getConf().get("spark.local.dir") if context is not None else None
    return local_dir is not None and Path(local_dir).is_relative_to(home)


def _report(function: object, path: str, error: object) -> None:
    """``shutil.rmtree``'s error handler: say what was left behind instead of failing the run."""
    print(f"could not remove {path}: {error}", flush=True)


def remove_home(home: Path, *, keep_spark_scratch: bool) -> None:
    """Remove ``home``, or all of it but its Spark scratch space (``keep_spark_scratch``)."""
    if not keep_spark_scratch:
        shutil.rmtree(home, onerror=_report)
        return
    for child in home.iterdir():
        if child.name == SPARK_SCRATCH:
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, onerror=_report)
        else:
            child.unlink(missing_ok=True)


def remove_at_exit(home: Path, pid: int) -> None:
    """At the end of process ``pid`` (not of a child forked from it), stop the Spark session that
    uses ``home``'s scratch space, then remove the rest of the home (Spark leaves its SQL warehouse
    and metastore files there)."""
    if os.getpid() != pid:
        return
    from pyspark.sql import SparkSession

    try:
        session = SparkSession.getActiveSession()
        if session is not None:
            session.stop()
    finally:
        shutil.rmtree(home, onerror=_report)


def _end_of_run(home: Path) -> None:
    """Remove a finished run's home (:func:`remove_home`), unless it is to be kept."""
    if (home / KEEP).exists():
        print(f"the run's home is kept, {home}: {(home / KEEP).read_text().strip()}", flush=True)
        return
    try:
        in_use = spark_scratch_in_use(home)
    except Exception as e:  # the JVM gone, say: keep the home rather than remove a live session's files
        print(f"the run's home is kept, {home}: its Spark session could not be asked about it ({e})", flush=True)
        return
    remove_home(home, keep_spark_scratch=in_use)
    if in_use:
        atexit.register(remove_at_exit, home, os.getpid())


def in_temporary_home(name: str) -> Callable[[Callable[Concatenate[Path, P], R]], Callable[P, R]]:
    """Run a benchmark's ``measure(home, …)`` in a new home ``tally-bench-<name>-*``, removed when
    the run returns (:func:`remove_home`); kept, and named, when it raises."""

    def decorate(measure: Callable[Concatenate[Path, P], R]) -> Callable[P, R]:
        @functools.wraps(measure)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            home = Path(tempfile.mkdtemp(prefix=f"tally-bench-{name}-"))
            try:
                result = measure(home, *args, **kwargs)
            except BaseException:
                print(f"the run failed: its home is kept for its logs, {home}", flush=True)
                raise
            _end_of_run(home)
            return result

        return run

    return decorate
