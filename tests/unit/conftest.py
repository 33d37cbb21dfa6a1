"""Fixtures every unit test shares."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from query import scan_cache
from query.scan_cache import PreparedScans
from query.scans import PreparedScan


@pytest.fixture(autouse=True)
def restore_main_module() -> Iterator[None]:
    """Streamlit's AppTest installs each script it runs as ``__main__`` and leaves it there; put pytest's
    back, or processes that later tests start with "spawn" would run the dashboard script."""
    main_module = sys.modules["__main__"]
    yield
    sys.modules["__main__"] = main_module


@pytest.fixture
def prepared_scans(monkeypatch: pytest.MonkeyPatch) -> PreparedScans:
    """A process's prepared scans of the test's own (query.scan_cache keeps one set per process)."""
    fresh = PreparedScans()
    monkeypatch.setattr(scan_cache, "SCANS", fresh)
    return fresh


@pytest.fixture
def scan_reads(monkeypatch: pytest.MonkeyPatch) -> list[PreparedScan]:
    """Each scan read whole from the table (not extended from an older one), as it is built."""
    built: list[PreparedScan] = []
    original = PreparedScan.read.__func__  # type: ignore[attr-defined]

    def counting(cls: type[PreparedScan], *args: Any, **kw: Any) -> PreparedScan:
        built.append(scan := original(cls, *args, **kw))
        return scan  # type: ignore[no-any-return]

    monkeypatch.setattr(PreparedScan, "read", classmethod(counting))
    return built
