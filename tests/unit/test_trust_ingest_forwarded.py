"""The client address behind proxies, through the whole ASGI app: a visitor cannot choose the IP
ingest hashes (client hash, visitor id, country, rate limits) by sending a forwarding header.

Proxies append the address they saw, so only the entries right of the last untrusted hop are
facts; everything left of it is what the visitor wrote.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from ingest.app import create_app
from ingest.enrich import client_hash
from ingest.pipeline import Pipeline
from ingest.proxies import ClientAddress, forwarded_for
from tally.settings import IngestSettings, Settings, SettingsError, SiteSettings
from tests.support.stores import MemoryStore

SITE = "a.example"
VISITOR, SPOOFED = "203.0.113.7", "81.2.69.142"  # the visitor's real address, and the one it claims
BEACON = {"id": "0b9f7f2e-8f2a-4c1e-9a53-000000000001", "s": SITE, "u": f"https://{SITE}/", "te": 1, "ts": 1}


def seen_as(tmp_path: Path, peer: str, headers: list[tuple[bytes, bytes]], **ingest: Any) -> str:
    """The address ingest took for the client of one beacon sent by ``peer`` with ``headers``:
    the candidate whose client hash the stored event carries ("?" when none of them)."""
    settings = Settings(
        home=str(tmp_path), sites=(SiteSettings(SITE, domains=(SITE,)),), ingest=IngestSettings(**ingest)
    )
    app, store = create_app(settings), MemoryStore()
    app.state.pipeline = pipeline = Pipeline(settings, store, app.state.limiter)
    messages = [{"type": "http.request", "body": json.dumps(BEACON).encode(), "more_body": False}]
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/api/event",
        "headers": [(b"content-type", b"text/plain"), *headers],
        "client": (peer, 40000),
    }

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    async def send(message: MutableMapping[str, Any]) -> None:
        pass

    asyncio.run(app(scope, receive, send))
    event = json.loads(store.appends[0][0][2])
    salt = pipeline.salts.salt_for(event["ts_received"])
    candidates = (VISITOR, SPOOFED, peer, "10.0.0.1", "10.0.0.2", "2001:db8:cafe::17", "garbage")
    return next((ip for ip in candidates if client_hash(salt, ip) == event["client_hash"]), "?")


def xff(value: str) -> list[tuple[bytes, bytes]]:
    return [(b"x-forwarded-for", value.encode())]


def invalid_forwarded() -> float:
    return REGISTRY.get_sample_value("tally_ingest_forwarded_invalid_total") or 0.0


def test_a_spoofed_leftmost_entry_through_one_trusted_proxy_is_not_believed(tmp_path: Path) -> None:
    # The visitor sends "X-Forwarded-For: 81.2.69.142"; the proxy appends the address it saw.
    header = xff(f"{SPOOFED}, {VISITOR}")
    assert seen_as(tmp_path, "127.0.0.1", header, trusted_proxies=("127.0.0.1",)) == VISITOR


def test_a_spoofed_leftmost_entry_through_two_trusted_proxies_is_not_believed(tmp_path: Path) -> None:
    # visitor -> proxy 10.0.0.1 (appends the visitor) -> proxy 127.0.0.1 (appends 10.0.0.1) -> ingest
    header = xff(f"{SPOOFED}, {VISITOR}, 10.0.0.1")
    assert seen_as(tmp_path, "127.0.0.1", header, trusted_proxies=("127.0.0.1", "10.0.0.1")) == VISITOR


def test_trusted_proxies_are_cidr_ranges(tmp_path: Path) -> None:
    header = xff(f"{SPOOFED}, {VISITOR}, 10.0.0.1")
    assert seen_as(tmp_path, "10.0.0.2", header, trusted_proxies=("10.0.0.0/8",)) == VISITOR
    # A bare address is one host: 10.0.0.1 is not trusted by "10.0.0.2", so it is the client.
    assert seen_as(tmp_path, "10.0.0.2", header, trusted_proxies=("10.0.0.2",)) == "10.0.0.1"


def test_a_header_repeated_on_several_lines_is_read_as_one_list(tmp_path: Path) -> None:
    # The visitor sends its own line; a proxy that adds a line of its own must still win.
    headers = [*xff(SPOOFED), *xff(VISITOR)]
    assert seen_as(tmp_path, "127.0.0.1", headers, trusted_proxies=("127.0.0.1",)) == VISITOR


def test_a_forwarding_header_from_an_untrusted_peer_is_ignored(tmp_path: Path) -> None:
    assert seen_as(tmp_path, VISITOR, xff(SPOOFED), trusted_proxies=("127.0.0.1",)) == VISITOR


@pytest.mark.parametrize("value", ["garbage", f"{SPOOFED}, garbage", f"{SPOOFED},,", "unknown", "1.2.3.4.5", " "])
def test_a_forwarded_value_that_is_not_an_address_falls_back_to_the_peer_and_is_counted(
    tmp_path: Path, value: str
) -> None:
    before = invalid_forwarded()
    assert seen_as(tmp_path, "127.0.0.1", xff(value), trusted_proxies=("127.0.0.1",)) == "127.0.0.1"
    assert invalid_forwarded() == before + (0 if not value.strip() else 1)


def test_the_standard_forwarded_header_is_walked_from_the_right_too(tmp_path: Path) -> None:
    trusted = {"trusted_proxies": ("127.0.0.0/8", "10.0.0.0/8"), "proxy_header": "forwarded"}
    header = [(b"forwarded", f'for={SPOOFED};proto=https, For="[2001:db8:cafe::17]:4711", for=10.0.0.1'.encode())]
    assert seen_as(tmp_path, "127.0.0.1", header, **trusted) == "2001:db8:cafe::17"
    header = [(b"forwarded", f'for={SPOOFED}, for="{VISITOR}:47011";by=10.0.0.1'.encode())]
    assert seen_as(tmp_path, "127.0.0.1", header, **trusted) == VISITOR
    # With Forwarded configured, an X-Forwarded-For the visitor sent is not read at all.
    assert seen_as(tmp_path, "127.0.0.1", [*xff(SPOOFED), (b"forwarded", b"for=10.0.0.2")], **trusted) == "10.0.0.2"


@pytest.mark.parametrize("value", ["for=_hidden", "for=unknown", 'for="[2001:db8::1"', "proto=https"])
def test_an_obfuscated_or_unknown_forwarded_node_falls_back_to_the_peer(tmp_path: Path, value: str) -> None:
    before = invalid_forwarded()
    header = [(b"forwarded", value.encode())]
    assert seen_as(tmp_path, "127.0.0.1", header, proxy_header="forwarded") == "127.0.0.1"
    assert invalid_forwarded() == before + 1


class Untouchable(list[tuple[bytes, bytes]]):
    """Request headers that fail the test if anyone reads them."""

    def __iter__(self) -> Any:
        raise AssertionError("the headers of a peer that is no trusted proxy were read")


def test_the_headers_of_a_peer_that_is_no_trusted_proxy_are_not_even_read() -> None:
    addresses = ClientAddress(trusted_proxies=("127.0.0.1/32", "10.0.0.0/8"), header="x-forwarded-for")
    assert addresses.client_ip({"type": "http", "client": (VISITOR, 1), "headers": Untouchable()}) == VISITOR


def test_a_proxy_seen_as_an_ipv4_mapped_ipv6_peer_is_still_trusted() -> None:
    addresses = ClientAddress(trusted_proxies=("127.0.0.1",), header="x-forwarded-for")
    assert addresses.client_ip({"type": "http", "client": ("::ffff:127.0.0.1", 1), "headers": xff(VISITOR)}) == VISITOR


@pytest.mark.parametrize("bad", ["10.0.0.1/8", "localhost", "10.0.0.0/33", "", "127.0.0.1 "])
def test_a_bad_trusted_proxy_range_is_a_settings_error_naming_the_key_and_the_value(bad: str) -> None:
    with pytest.raises(SettingsError) as refused:
        IngestSettings(trusted_proxies=("127.0.0.1/32", bad))
    assert str(refused.value).startswith(f"ingest.trusted_proxies: {bad!r} is not an IP address or CIDR range")


def test_an_unknown_proxy_header_is_a_settings_error() -> None:
    with pytest.raises(SettingsError) as refused:
        IngestSettings(proxy_header="x-real-ip")
    assert str(refused.value) == "ingest.proxy_header: expected x-forwarded-for or forwarded, got 'x-real-ip'"


@pytest.mark.parametrize(
    "proxy_element",
    ['for="[2001:db8::1]:4711"', f'for={VISITOR};by="_edge"', f"for={VISITOR}"],
)
def test_an_unclosed_quote_cannot_swallow_the_proxys_own_element(tmp_path: Path, proxy_element: str) -> None:
    # Read leniently, the visitor's open quote ran on into the proxy's element, which then vanished.
    header = [(b"forwarded", f'for={SPOOFED};x=", {proxy_element}'.encode())]
    before = invalid_forwarded()
    assert seen_as(tmp_path, "127.0.0.1", header, proxy_header="forwarded") == "127.0.0.1"
    assert invalid_forwarded() == before + 1


@pytest.mark.parametrize("proxy_header", ["forwarded", "x-forwarded-for"])
def test_a_forwarding_header_longer_than_any_proxy_chain_falls_back_to_the_peer(
    tmp_path: Path, proxy_header: str
) -> None:
    flood = '"' + '\\"' * 8000 if proxy_header == "forwarded" else ",".join([SPOOFED] * 1000)
    header = [(proxy_header.encode(), f"{flood}, for={VISITOR}".encode())]
    assert seen_as(tmp_path, "127.0.0.1", header, proxy_header=proxy_header) == "127.0.0.1"


def test_forwarded_elements_and_their_for_nodes_parse_in_one_pass() -> None:
    assert forwarded_for('for=192.0.2.60;proto=http;by=203.0.113.43, For="[2001:db8::1]:4711"') == [
        "192.0.2.60",
        "[2001:db8::1]:4711",
    ]
    assert forwarded_for("proto=https, for=198.51.100.17") == ["", "198.51.100.17"]
    assert forwarded_for('for="a\\"b"') == ['a"b']
    assert forwarded_for('for=1.2.3.4;x="') is None
    assert forwarded_for('for=1.2"3.4') is None
