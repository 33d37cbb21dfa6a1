"""Fixtures every unit test shares."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def restore_main_module() -> Iterator[None]:
    """Streamlit's AppTest installs each script it runs as ``__main__`` and leaves it there; put pytest's
    back, or processes that later tests start with "spawn" would run the dashboard script."""
    main_module = sys.modules["__main__"]
    yield
    sys.modules["__main__"] = main_module
