"""Test-suite wide options and fixtures: full-length runs (``@pytest.mark.long``) are opt-in, and
the dashboard's site follower is stopped after each test.

CI runs the short version of every fault, scale and fuzz test; the full-length versions run
with ``make test-long`` (``TALLY_LONG_TESTS=1``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# A pytest-xdist worker's __main__ (execnet's) has neither __spec__ nor __file__, which
# pyspark.sql.connect (imported by great_expectations) takes for a doctest run and exits on. An
# empty file of its own: a process spawned by multiprocessing runs it as its main, harmlessly.
_main = sys.modules["__main__"]
if getattr(_main, "__spec__", None) is None and not hasattr(_main, "__file__"):
    _main.__file__ = str(Path(__file__).parent / "support" / "worker_main.py")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("TALLY_LONG_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason="full-length run: `make test-long` (TALLY_LONG_TESTS=1) runs it")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def stop_site_followers() -> Iterator[None]:
    """After a test that ran the dashboard page, release its cached site registry, so that the
    follower the test started stops (``dashboard/sites.py``); its thread ends within seconds.
    Left running, each one retried a broker that was not there until pytest ended, logging after
    pytest had closed its streams, and kept the process multi-threaded for tests that fork."""
    yield
    sites = sys.modules.get("dashboard.sites")
    if sites is not None:
        sites._registry.clear()
