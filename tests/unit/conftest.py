"""Fixtures every unit test shares."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from query import scan_cache
from query.scan_cache import PreparedScans
from query.scans import PreparedScan
from tally.settings import Settings, load_settings


@pytest.fixture(autouse=True)
def restore_main_module() -> Iterator[None]:
    """Streamlit's AppTest installs each script it runs as ``__main__`` and leaves it there; put pytest's
    back, or processes that later tests start with "spawn" would run the dashboard script."""
    main_module = sys.modules["__main__"]
    yield
    sys.modules["__main__"] = main_module


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test's own Tally home: ``TALLY_HOME`` is ``tmp_path`` and ``TALLY_ENV`` is ``test``, so
    :func:`tally.settings.load_settings` reads conf/tally.yaml with conf/test.yaml there. A test file
    that needs other values sets their ``TALLY_<SECTION>__<KEY>`` variables in an autouse fixture
    of its own (autouse fixtures come first)."""
    monkeypatch.setenv("TALLY_HOME", str(tmp_path))
    monkeypatch.setenv("TALLY_ENV", "test")
    # The unit tier's apps answer raw questions in their own threads, where a test can stand in for
    # the engine; tests/unit/test_api_raw_workers.py and the integration tier run the worker processes.
    monkeypatch.setenv("TALLY_API__RAW_IN_PROCESSES", "false")
    return tmp_path


@pytest.fixture
def settings(home: Path) -> Settings:
    """The settings of a test run: conf/ as CI has it, in the test's own home (:func:`home`)."""
    return load_settings()


@pytest.fixture
def conf_file(home: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Settings]:
    """Settings from a conf/tally.yaml of the test's own, alone: ``conf_file(text)`` writes ``text``
    to conf/tally.yaml in the test's home (:func:`home`), points ``TALLY_CONF_DIR`` there and loads
    it. ``TALLY_ENV`` is unset, as in production, so no conf/test.yaml lowers a default. Code that
    loads the settings itself (the CLI, a dashboard page) reads the same file; a second call
    replaces it. For a test that needs a conf of its own (users, sites) rather than conf/ as CI has
    it with a few ``TALLY_<SECTION>__<KEY>`` variables (:func:`settings`)."""
    conf = home / "conf"
    monkeypatch.setenv("TALLY_CONF_DIR", str(conf))
    monkeypatch.delenv("TALLY_ENV")

    def write(text: str) -> Settings:
        conf.mkdir(exist_ok=True)
        (conf / "tally.yaml").write_text(text)
        return load_settings()

    return write


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


DELAY_S = 0.05
RESPONSE = b"HTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\n{}"


async def _serve(ready: threading.Event, port_box: list[int], stop: asyncio.Event) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                await reader.readexactly(length)
                await asyncio.sleep(DELAY_S)
                writer.write(RESPONSE)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port_box.append(server.sockets[0].getsockname()[1])
    ready.set()
    async with server:
        await stop.wait()


@pytest.fixture
def slow_server() -> Iterator[int]:
    """A loopback HTTP server that answers every request 202 after DELAY_S; its port."""
    loop = asyncio.new_event_loop()
    ready, port_box = threading.Event(), list[int]()
    stop = asyncio.Event()
    thread = threading.Thread(target=loop.run_until_complete, args=(_serve(ready, port_box, stop),), daemon=True)
    thread.start()
    assert ready.wait(10)
    yield port_box[0]
    loop.call_soon_threadsafe(stop.set)
    thread.join(10)


@pytest.fixture
def dashboard_cookies(monkeypatch: pytest.MonkeyPatch) -> None:
    """The page reads its session cookie from :data:`tests.unit.dashboard_page.BROWSER`, empty at the test's start."""
    import dashboard.login
    from tests.unit.dashboard_page import BROWSER

    BROWSER.clear()
    monkeypatch.setattr(dashboard.login, "session_cookie", lambda: BROWSER.get("cookie"))
