"""Test-suite wide options: full-length runs (``@pytest.mark.long``) are opt-in.

CI runs the short version of every fault, scale and fuzz test; the full-length versions run
with ``make test-long`` (``TALLY_LONG_TESTS=1``).
"""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("TALLY_LONG_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason="full-length run: `make test-long` (TALLY_LONG_TESTS=1) runs it")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)
