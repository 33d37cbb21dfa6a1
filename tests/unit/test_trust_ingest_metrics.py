"""Metrics are not on the public ingest port: ``python -m ingest`` serves them on a loopback port
of its own (``ingest.metrics_port``). The OpenAPI document stays public, and tells nothing more
than the public endpoint shows anyway."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator, MutableMapping
from pathlib import Path
from typing import Any

import httpx
import pytest

import tally
from ingest.__main__ import serve_metrics
from ingest.app import create_app
from ops.stack import free_ports
from tally.settings import IngestSettings, Settings, SettingsError


def get(path: str) -> tuple[int, bytes]:
    """GET ``path`` from the public ingest app (plain ASGI, no server)."""
    app = create_app(Settings())
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "path": path,
        "headers": [],
        "query_string": b"",
        "client": ("1.2.3.4", 1),
    }
    asyncio.run(app(scope, receive, send))
    return int(sent[0]["status"]), b"".join(m.get("body", b"") for m in sent[1:])


def test_the_public_port_does_not_serve_metrics() -> None:
    assert get("/metrics")[0] == 404


def test_the_public_openapi_document_names_no_metrics_and_no_release() -> None:
    status, body = get("/openapi.json")
    assert status == 200
    assert b"/metrics" not in body and b"/api/event" in body
    assert f'"version":"{tally.__version__}"'.encode() not in body  # the wire format's version instead


@pytest.fixture
def multiproc_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    yield tmp_path


def test_metrics_are_served_on_loopback_only(multiproc_dir: Path) -> None:
    port = free_ports(1)[0]
    server = serve_metrics(port)
    try:
        assert server.server_address[0] == "127.0.0.1"
        assert httpx.get(f"http://127.0.0.1:{port}/metrics").status_code == 200
    finally:
        server.shutdown()
        server.server_close()


def test_a_metrics_port_in_use_stops_ingest_naming_the_setting(multiproc_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(SystemExit) as stopped:
            serve_metrics(taken.getsockname()[1])
    assert "set ingest.metrics_port" in str(stopped.value.code)


def test_a_metrics_port_out_of_range_is_a_settings_error() -> None:
    with pytest.raises(SettingsError) as refused:
        IngestSettings(metrics_port=70000)
    assert str(refused.value) == "ingest.metrics_port: 70000 must be a port number, or 0 for off"
