"""Each benchmark run's home: a directory of its own in the system's temporary directory (its
broker's log, its warehouses, its services' logs), removed when the run ends.

A run that fails keeps its home, and says where, for the logs its error points to. The scratch
space (``spark/``, ``jobs/spark.py``) of a Spark session the run started in this process is kept
until the process ends, when the session is stopped and the rest removed: ``python -m bench``
runs every benchmark in one process, and the session the first one starts serves the others (a
stopped SparkContext cannot be started again in-process).
"""

from __future__ import annotations

import atexit
import functools
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

SPARK_SCRATCH = "spark"  # under a home: a Spark session's local directory and SQL warehouse


def spark_scratch_in_use(home: Path) -> bool:
    """Whether this process runs a Spark session whose local directory is in ``home``."""
    if "pyspark.sql" not in sys.modules:  # never imported: no session (and no import of Spark here)
        return False
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    local_dir = session.conf.get("spark.local.dir", None) if session is not None else None
    return local_dir is not None and Path(local_dir).is_relative_to(home)


def remove_home(home: Path, *, keep_spark_scratch: bool) -> None:
    """Remove ``home``, or all of it but its Spark scratch space (``keep_spark_scratch``)."""
    if not keep_spark_scratch:
        shutil.rmtree(home, ignore_errors=True)
        return
    for child in home.iterdir():
        if child.name == SPARK_SCRATCH:
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)


def remove_at_exit(home: Path) -> None:
    """At the process's end, stop the Spark session that uses ``home``'s scratch space, then remove
    the rest of the home (Spark leaves its SQL warehouse and metastore files there)."""
    from pyspark.sql import SparkSession

    session = SparkSession.getActiveSession()
    if session is not None:
        session.stop()
    shutil.rmtree(home, ignore_errors=True)


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
            in_use = spark_scratch_in_use(home)
            remove_home(home, keep_spark_scratch=in_use)
            if in_use:
                atexit.register(remove_at_exit, home)
            return result

        return run

    return decorate
