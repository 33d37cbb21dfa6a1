"""Over HTTP, with Kafka failing and the spool's disk full: the request is refused with 503 and a
Retry-After (nothing of it was stored), and /healthz says degraded."""

from __future__ import annotations

import asyncio
import errno
import json
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

from ingest.app import create_app
from ingest.durable import DurableLog
from ingest.eventlog import AppendFailed
from ingest.pipeline import Pipeline
from ingest.spool import Record, Spool
from tally.settings import Settings, SiteSettings

SITE = "a.example"


class DownKafka:
    async def append(self, records: list[Record], *, timeout_s: float | None = None) -> None:
        raise AppendFailed("Local: Message timed out")

    def renew(self, reason: str) -> None:
        pass


def disk_full(fd: int, data: bytes | memoryview) -> int:
    raise OSError(errno.ENOSPC, "No space left on device")


async def call(app: Any, method: str, path: str, body: bytes = b"") -> tuple[int, dict[str, str], bytes]:
    headers = [(b"content-type", b"text/plain")]
    scope = {"type": "http", "method": method, "path": path, "headers": headers, "client": ("10.0.0.9", 1)}
    scope |= {"query_string": b""}
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[MutableMapping[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    await app(scope, receive, send)
    start, content = sent[0], b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, content


def test_an_event_neither_kafka_nor_the_spool_can_take_is_refused_with_503_and_retry_after(tmp_path: Path) -> None:
    settings = Settings(home=str(tmp_path), sites=(SiteSettings(SITE, domains=(SITE,)),))
    app = create_app(settings)
    spool = Spool(tmp_path / "spool", writer=disk_full)
    store = DurableLog(DownKafka(), spool)  # type: ignore[arg-type]
    app.state.durable_log = store
    app.state.pipeline = Pipeline(settings, store, app.state.limiter)  # what the lifespan does, without Kafka
    one = {"id": "0b9f7f2e-8f2a-4c1e-9a53-000000000001", "s": SITE, "u": f"https://{SITE}/", "te": 1, "ts": 1}

    status, headers, body = asyncio.run(call(app, "POST", "/api/event", json.dumps(one).encode()))
    assert status == 503, body
    assert int(headers["retry-after"]) > 0
    assert json.loads(body)["error"] == "unavailable" and "retry later" in json.loads(body)["message"]
    assert spool.path.stat().st_size == 0 and spool.spooled == 0

    status, _, body = asyncio.run(call(app, "GET", "/healthz"))
    assert status == 200 and json.loads(body)["status"] == "degraded"
