"""The client's address behind trusted proxies: ``X-Forwarded-For`` or ``Forwarded`` (RFC 7239),
walked from the right, so that the address a visitor writes into the header is never taken.

Proxies append the address they saw; the entries left of the last trusted proxy are whatever the
client sent. ``ingest.trusted_proxies`` are CIDR ranges (docs/SECURITY.md).
"""

from __future__ import annotations

import functools
import ipaddress
import re

from prometheus_client import Counter
from starlette.types import Scope

FORWARDED_INVALID = Counter(
    "tally_ingest_forwarded_invalid_total",
    "Requests from a trusted proxy whose forwarding header held no valid client address (the peer's was used)",
)
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
MAX_NODE = 64  # "[IPv6%zone]:port" fits; anything longer is no address (and is not cached)
# A chain of real proxies writes a few hundred bytes at most; a longer header is someone else's.
MAX_HEADER = 4096


def parse_ip(node: str) -> IPAddress | None:
    """An address as proxies write it: bare, ``IPv4:port``, or ``[IPv6]`` with or without a port;
    an IPv4-mapped IPv6 address as IPv4. None for anything else ("unknown", "_hidden", garbage)."""
    text = node.strip()
    if text.startswith("["):
        text, bracket, port = text[1:].partition("]")
        if not bracket or (port and not port.startswith(":")):
            return None
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        return ip.ipv4_mapped
    return ip


def forwarded_for(value: str) -> list[str] | None:
    """The ``for=`` node of each element of a Forwarded header (RFC 7239), unquoted, in order
    ("" for an element without one); None for a header that does not parse.

    One pass over the text, so its cost is linear in the header's length. A quote left open, or
    one inside a token, makes the whole header invalid: read leniently, a visitor's unclosed quote
    would swallow the proxy's own element behind it, and the visitor's address would be taken.
    """
    nodes: list[str] = []
    node = ""
    token: list[str] = []
    quoted = escaped = False

    def close_pair() -> str | None:
        name, _, raw = "".join(token).partition("=")
        token.clear()
        text = raw.strip()
        if '"' in text:
            if len(text) < 2 or text[0] != '"' or text[-1] != '"':
                return None
            text = re.sub(r"\\(.)", r"\1", text[1:-1])
        return text if name.strip().lower() == "for" else ""

    for char in value:
        if escaped:
            escaped = False
        elif quoted:
            if char == "\\":
                escaped = True
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
        elif char in ";,":
            found = close_pair()
            if found is None:
                return None
            node = found or node
            if char == ",":
                nodes.append(node)
                node = ""
            continue
        token.append(char)
    if quoted or escaped:
        return None
    found = close_pair()
    if found is None:
        return None
    nodes.append(found or node)
    return nodes


class ClientAddress:
    """Works out the client's address; built once at start-up from ``ingest.trusted_proxies``.

    A peer that is not a trusted proxy costs one cached lookup and no header parsing. Behind a
    proxy, each hop is parsed once: clients send several beacons, and proxies are few.
    """

    def __init__(self, *, trusted_proxies: tuple[str, ...], header: str) -> None:
        networks = [ipaddress.ip_network(p) for p in trusted_proxies]  # settings checked each one
        # (version, network, mask) as integers: an address is in one if its masked bits match.
        self.networks = tuple((n.version, int(n.network_address), int(n.netmask)) for n in networks)
        self.header = header.encode()
        self._is_forwarded = header == "forwarded"
        # Bounded: peers and hops are few (proxies, returning clients) or many (direct clients).
        self.resolve = functools.lru_cache(maxsize=4096)(self._resolve)

    def _resolve(self, node: str) -> tuple[str, bool] | None:
        """A peer or hop as (its address, written canonically; whether it is a trusted proxy)."""
        ip = parse_ip(node)
        if ip is None:
            return None
        value, version = int(ip), ip.version
        return str(ip), any(v == version and value & mask == net for v, net, mask in self.networks)

    def client_ip(self, scope: Scope) -> str:
        """The client's address for an ASGI request ``scope``."""
        client = scope.get("client")
        peer: str = client[0] if client else ""
        resolved = self.resolve(peer)
        if resolved is None or not resolved[1]:
            return peer
        # Repeated headers are one list, in order (RFC 9110): a proxy may add its own line.
        value = b",".join([v for name, v in scope["headers"] if name == self.header]).decode("latin-1")
        if not value.strip():
            return peer  # the proxy's own request
        hops = (forwarded_for(value) if self._is_forwarded else value.split(",")) if len(value) <= MAX_HEADER else None
        if hops is None:  # no proxy wrote this
            FORWARDED_INVALID.inc()
            return peer
        farthest = peer
        for hop in reversed(hops):
            resolved = self.resolve(hop.strip()) if len(hop) <= MAX_NODE else None
            if resolved is None:  # a trusted proxy would have written an address: someone else wrote this
                FORWARDED_INVALID.inc()
                return peer
            farthest, trusted = resolved
            if not trusted:
                return farthest
        return farthest  # every hop a trusted proxy: the farthest one
