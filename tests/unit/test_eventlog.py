"""The producer adapter serves its delivery reports on the event loop: no poll thread, no hang."""

from __future__ import annotations

import asyncio
import time

import pytest

from ingest.eventlog import AppendFailed, EventLog


def test_an_append_nobody_acknowledges_fails_after_the_delivery_timeout() -> None:
    log = EventLog(client_config={"bootstrap.servers": "127.0.0.1:1", "log_level": 0}, delivery_timeout_ms=300)

    async def append() -> float:
        started = time.monotonic()
        with pytest.raises(AppendFailed):
            await log.append([("t", b"k", b"v1"), ("t", None, b"v2")])
        return time.monotonic() - started

    try:
        assert asyncio.run(append()) < 5
    finally:
        assert log.close(timeout=1) == 0
