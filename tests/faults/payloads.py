"""Hypothesis strategies for what a browser, a broken client or an attacker can send to ingest.

Bodies range from valid beacons (the tracker's wire format, ``ingest/PAYLOAD.md``) through
beacons with one field replaced by any JSON value, batches mixing both, any JSON document and
any bytes, to deeply nested JSON and bodies past the size cap; each with a content type, valid
or not.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

SITE = "demo.tally.local"

# Secrets a visitor's URLs carry, which ingest must not keep (it stores the allowed query
# parameters only, no userinfo, and a referrer's origin and path). The fault tests' load sends
# them in page URLs and referrers, and the leak scan must find neither at rest. Lower case, so
# that no lower-casing on the way can hide a copy from the scan.
PLANTED_EMAIL = "planted.visitor@leak-test.example"
PLANTED_TOKEN = "tk-planted-3f9a1c07e5b2d846"
PLANTED = (PLANTED_EMAIL, PLANTED_TOKEN)


def url_with_secrets(site: str, path: str) -> str:
    """A page URL carrying both secrets: as ``user:password@`` and in the query, as a form
    (``@`` as is) and as ``encodeURIComponent`` (``%40``) send them, beside an allowed utm_source."""
    encoded = PLANTED_EMAIL.replace("@", "%40")
    return (
        f"https://visitor:{PLANTED_TOKEN}@{site}{path}"
        f"?email={PLANTED_EMAIL}&utm_source=load&token={PLANTED_TOKEN}&to={encoded}#access_token={PLANTED_TOKEN}"
    )


def referrer_with_secrets() -> str:
    """A referrer carrying both secrets: a webmail page's query and fragment, and userinfo."""
    userinfo = f"{PLANTED_EMAIL.replace('@', '%40')}:{PLANTED_TOKEN}"
    return f"https://{userinfo}@webmail.example/read?to={PLANTED_EMAIL}#{PLANTED_TOKEN}"


OTHER_SITES = ("unknown.example", "limited.tally.test", "", "DEMO.TALLY.LOCAL")
WIRE_KEYS = ("v", "id", "k", "n", "s", "u", "r", "ti", "te", "ts", "w", "l", "z", "p", "e", "ld")
CONTENT_TYPES = ("text/plain", "application/json", "text/plain;charset=UTF-8", "", "application/xml", "multipart/x")

json_values: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


@st.composite
def valid_beacons(draw: st.DrawFn) -> dict[str, Any]:
    """A beacon the tracker could send for the demo site (sometimes with every optional field)."""
    now = int(time.time() * 1000)
    sent = now + draw(st.integers(-60_000, 60_000))  # device clocks are off
    beacon: dict[str, Any] = {
        "id": str(draw(st.uuids(version=4))),
        "s": SITE,
        "u": f"https://{SITE}/{draw(st.text('abc/-_%?=&#é', max_size=30))}",
        "te": sent - draw(st.integers(0, 3_600_000)),
        "ts": sent,
    }
    kind = draw(st.sampled_from(["pageview", "pageview", "event", "engagement"]))
    if kind != "pageview":
        beacon["k"] = kind
    if kind == "event":
        beacon["n"] = draw(st.text(min_size=1, max_size=40))
    optional = {
        "r": st.sampled_from(["https://www.google.com/", "https://t.co/x", "", "android-app://x"]),
        "ti": st.text(max_size=60),
        "w": st.integers(0, 100_000),
        "l": st.text(max_size=35),
        "z": st.text(max_size=64),
        "p": st.dictionaries(st.text(min_size=1, max_size=64), st.text(max_size=256) | st.integers(), max_size=5),
        "e": st.integers(0, 86_400_000),
        "ld": st.integers(0, 3_600_000),
    }
    for key in draw(st.lists(st.sampled_from(sorted(optional)), unique=True)):
        beacon[key] = draw(optional[key])
    return beacon


@st.composite
def mutated_beacons(draw: st.DrawFn) -> dict[str, Any]:
    """A valid beacon with one wire field replaced by any JSON value or removed, or the site changed."""
    beacon = draw(valid_beacons())
    key = draw(st.sampled_from(WIRE_KEYS))
    action = draw(st.sampled_from(["replace", "remove", "site"]))
    if action == "replace":
        beacon[key] = draw(json_values)
    elif action == "remove":
        beacon.pop(key, None)
    else:
        beacon["s"] = draw(st.sampled_from(OTHER_SITES))
    return beacon


beacons = valid_beacons() | mutated_beacons()


@dataclass(frozen=True)
class Request:
    """One request to ``POST /api/event``: the body's bytes and its content type."""

    body: bytes
    content_type: str

    @property
    def items(self) -> list[Any]:
        """The items ingest sees in the body, if it decodes as JSON (as ``json.loads`` decodes bytes)."""
        try:
            document = json.loads(self.body)
        except ValueError:
            return []
        return document if isinstance(document, list) else [document]

    @property
    def is_batch(self) -> bool:
        return self.body.lstrip()[:1] == b"["

    def __repr__(self) -> str:  # hypothesis shows failing examples: keep them short
        return f"Request({self.content_type!r}, {self.body[:200]!r})"


@st.composite
def requests(draw: st.DrawFn, *, max_batch: int = 50, max_body: int = 65536) -> Request:
    """A request body of any kind, with a content type (usually one ingest accepts)."""
    shape = draw(st.sampled_from(["beacon", "beacon", "batch", "batch", "json", "bytes", "text", "huge", "nested"]))
    if shape == "beacon":
        body = json.dumps(draw(beacons)).encode()
    elif shape == "batch":
        body = json.dumps(draw(st.lists(beacons | json_values, min_size=0, max_size=max_batch + 3))).encode()
    elif shape == "json":
        body = json.dumps(draw(json_values)).encode()
    elif shape == "bytes":
        body = draw(st.binary(max_size=300))
    elif shape == "text":
        body = draw(st.text(max_size=300)).encode("utf-8", "surrogatepass")
    elif shape == "nested":  # deeper than Python's recursion limit, still under the size cap
        body = draw(st.sampled_from([b"[", b'{"p":'])) * draw(st.integers(500, max_body // 6))
    else:
        body = json.dumps(draw(valid_beacons()) | {"ti": "x" * max_body}).encode()
    content_type = draw(st.sampled_from(CONTENT_TYPES[:3]) | st.sampled_from(CONTENT_TYPES))
    return Request(body, content_type)
