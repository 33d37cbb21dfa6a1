"""ingest.app's own HTTP pieces, driven as plain ASGI (no server): the capped body read, the
client address, the one response shared by every accepted beacon, and the endpoints reading
what is wired on ``app.state``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
from starlette.requests import ClientDisconnect, Request

from ingest.app import ONE_ACCEPTED_RESPONSE, TooLarge, create_app, json_response, read_capped
from ingest.pipeline import Outcome, Pipeline
from ingest.proxies import ClientAddress
from tally.settings import Settings, SiteSettings
from tests.support.stores import MemoryStore


def request(messages: list[dict[str, Any]], client: tuple[str, int] | None = ("10.0.0.9", 5000)) -> Request:
    queue = list(messages)

    async def receive() -> dict[str, Any]:
        return queue.pop(0)

    scope: dict[str, Any] = {"type": "http", "method": "POST", "path": "/api/event", "headers": [], "client": client}
    return Request(scope, receive)


def body(*chunks: bytes) -> list[dict[str, Any]]:
    return [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]


def test_a_body_is_read_whole_in_one_message_or_in_several() -> None:
    assert asyncio.run(read_capped(request(body(b"abc")), 10, "3")) == b"abc"
    assert asyncio.run(read_capped(request(body(b"ab", b"", b"cd")), 10, "")) == b"abcd"
    assert asyncio.run(read_capped(request(body(b"")), 10, "0")) == b""


@pytest.mark.parametrize("chunks", [(b"x" * 11,), (b"x" * 6, b"x" * 6, b"never read")])
def test_a_body_over_the_cap_is_refused_with_its_head_and_its_declared_size(chunks: tuple[bytes, ...]) -> None:
    with pytest.raises(TooLarge) as refused:
        asyncio.run(read_capped(request(body(*chunks)), 10, "5000"))
    assert refused.value.size == 5000 and 10 < len(refused.value.head) <= 12
    with pytest.raises(TooLarge) as undeclared:
        asyncio.run(read_capped(request(body(*chunks)), 10, ""))
    assert undeclared.value.size == len(undeclared.value.head)  # as far as read


def test_a_client_that_goes_away_mid_body_is_a_disconnect() -> None:
    with pytest.raises(ClientDisconnect):
        asyncio.run(read_capped(request([*body(b"ab", b"cd")[:1], {"type": "http.disconnect"}]), 10, ""))


def test_the_client_address_is_the_peer_unless_a_trusted_proxy_forwards_one() -> None:
    addresses = ClientAddress(trusted_proxies=("127.0.0.1",), header="x-forwarded-for")

    def client_ip(peer: tuple[str, int] | None, forwarded: str) -> str:
        headers = [(b"x-forwarded-for", forwarded.encode())]
        return addresses.client_ip({"type": "http", "headers": headers, "client": peer})

    assert client_ip(("10.0.0.9", 5000), "203.0.113.7") == "10.0.0.9"  # untrusted peer
    assert client_ip(("127.0.0.1", 1), "10.1.1.1, 203.0.113.7") == "203.0.113.7"
    assert client_ip(None, "") == ""


def test_every_single_accept_gets_the_shared_response_and_its_own_header_list() -> None:
    assert json_response(Outcome(202, {"accepted": 1})) is ONE_ACCEPTED_RESPONSE
    assert json_response(Outcome(202, {"accepted": 2})) is not ONE_ACCEPTED_RESPONSE
    assert json_response(Outcome(202, {"accepted": 1, "rejected": []})) is not ONE_ACCEPTED_RESPONSE
    sent: list[MutableMapping[str, Any]] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message["headers"].append((b"x-added-by", b"a middleware"))  # e.g. CORS or GZip middleware
        sent.append(message)

    async def nothing() -> dict[str, Any]:
        return {}

    for _ in range(2):
        asyncio.run(ONE_ACCEPTED_RESPONSE({"type": "http"}, nothing, send))
    starts = [m for m in sent if m["type"] == "http.response.start"]
    assert [m["status"] for m in starts] == [202, 202]
    assert all(m["headers"].count((b"x-added-by", b"a middleware")) == 1 for m in starts)
    assert (b"access-control-allow-origin", b"*") in starts[1]["headers"]
    assert [m["body"] for m in sent if m["type"] == "http.response.body"] == [b'{"accepted":1}'] * 2


def test_the_endpoints_answer_from_the_pipeline_wired_on_the_app_state(tmp_path: Path) -> None:
    settings = Settings(home=str(tmp_path), sites=(SiteSettings("a.example", domains=("a.example",)),))
    app, store = create_app(settings), MemoryStore()
    app.state.pipeline = Pipeline(settings, store, app.state.limiter)  # what the lifespan does, without Kafka
    one = {"id": "0b9f7f2e-8f2a-4c1e-9a53-000000000001", "s": "a.example", "u": "https://a.example/", "te": 1, "ts": 1}

    async def post(content_type: bytes) -> list[MutableMapping[str, Any]]:
        headers = [(b"content-type", content_type)]
        scope = {"type": "http", "method": "POST", "path": "/api/event", "headers": headers, "client": ("10.0.0.9", 1)}
        messages = body(json.dumps(one).encode())
        sent: list[MutableMapping[str, Any]] = []

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(message)

        async def receive() -> dict[str, Any]:
            return messages.pop(0)

        await app(scope, receive, send)
        return sent

    accepted = asyncio.run(post(b"text/plain"))
    assert accepted[0]["status"] == 202 and accepted[1]["body"] == b'{"accepted":1}'
    assert [topic for topic, _, _ in store.appends[0]] == [settings.kafka.pageviews_topic]
    refused = asyncio.run(post(b"application/x-www-form-urlencoded"))
    assert refused[0]["status"] == 415 and b"unsupported_media_type" in refused[1]["body"]
    assert [topic for topic, _, _ in store.appends[1]] == [settings.kafka.rejected_topic]
