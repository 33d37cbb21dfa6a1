"""Hypothesis strategies for what a browser, a broken client or an attacker can send to Tally.

Ingest's bodies range from valid beacons (the tracker's wire format, ``ingest/PAYLOAD.md``) through
beacons with one field replaced by any JSON value, batches mixing both, any JSON document and
any bytes, to deeply nested JSON and bodies past the size cap; each with a content type, valid
or not. Plausible's Events API body (:func:`plausible_bodies`) and the Stats API's query
(:func:`stats_requests`) are drawn the same way.

Text is drawn from the whole of Unicode (:func:`unicode_text`), with the characters that break
text handling (lone surrogates, NUL, bidi controls, line separators, non-characters) drawn often,
in keys as well as values. Some JSON cannot come from a Python value: a number of 5,000 digits,
``1e400``, nesting deeper than ``json.dumps`` recurses. A :func:`raw_json` stand-in holds such
text, and :func:`json_body` writes a document as the bytes a client sends, the stand-ins in place.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
import time
from dataclasses import dataclass
from typing import Any, TypeVar

from hypothesis import strategies as st

from query.plausible import RANGE_SHORTCUTS
from query.spec import DIMENSIONS, FILTER_OPERATORS, METRICS

T = TypeVar("T")

SITE = "demo.tally.local"
OTHER_SITE = "limited.tally.test"  # conf/test.yaml's second site
UNKNOWN_DOMAIN = "unknown.example"

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


def plausible_event_with_secrets(site: str, path: str) -> dict[str, Any]:
    """A Plausible custom event naming ``site`` and an unknown domain, both secrets in its URL and
    referrer: one event is stored for ``site`` and the unknown domain's refusal is a dead letter."""
    return {
        "n": "signup",
        "u": url_with_secrets(site, path),
        "d": f"{site},{UNKNOWN_DOMAIN}",
        "r": referrer_with_secrets(),
        "p": {"plan": "pro"},
    }


OTHER_SITES = ("unknown.example", "limited.tally.test", "", "DEMO.TALLY.LOCAL")
WIRE_KEYS = ("v", "id", "k", "n", "s", "u", "r", "ti", "te", "ts", "w", "l", "z", "p", "e", "ld")
CONTENT_TYPES = ("text/plain", "application/json", "text/plain;charset=UTF-8", "", "application/xml", "multipart/x")

# Characters that have broken text handling somewhere: lone surrogates (JSON carries them as
# \ud800 escapes; UTF-8 cannot store them), NUL and other controls, bidi controls, line and
# paragraph separators, non-characters, the byte order mark, a combining mark, an emoji.
SURROGATES = ("\ud800", "\udbff", "\udc00", "\udfff")
ODD_CHARACTERS = (
    *SURROGATES,
    *("\x00", "\x1b", "\x7f", "\x85", "\t", "\r", "\u00a0", "\u200b", "\u200f", "\u061c", "\\", '"'),
    *("\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069"),
    *("\u2028", "\u2029", "\ufffe", "\uffff", "\ufdd0", "\U0001fffe", "\U0010ffff"),
    *("\ufeff", "\u0301", "\U0001f600"),
)
# And the same sent as text that a later decoding step may turn into one (a percent or HTML escape).
ODD_PIECES = (*ODD_CHARACTERS, "\r\n", "%00", "%ED%A0%80", "%E2%80%AE", "\\u0000", "&#0;", "&#x202e;")
ENCODINGS = ("ascii", "utf-8", "raw-controls")  # how json_body writes a body
RAW_JSON = re.compile(r'"\\u0000raw:([0-9a-f]*)\\u0000"')
CONTROL_ESCAPE = re.compile(r"\\u00[01][0-9a-f]")


@functools.cache  # each strategy built once: hypothesis validates every new one again
def unicode_text(*, min_size: int = 0, max_size: int = 40, surrogates: bool = True) -> st.SearchStrategy[str]:
    """Text over the whole of Unicode, with :data:`ODD_CHARACTERS` drawn often; ``surrogates=False``
    leaves the lone surrogates out (text UTF-8 can hold: what a valid field may carry)."""
    odd = ODD_CHARACTERS if surrogates else ODD_CHARACTERS[len(SURROGATES) :]
    alphabet = st.characters(codec=None if surrogates else "utf-8") | st.sampled_from(odd)
    return st.text(alphabet, min_size=min_size, max_size=max_size)


@functools.cache
def odd_text(*, max_size: int = 30) -> st.SearchStrategy[str]:
    """Text with at least one of :data:`ODD_PIECES` in it (a lone surrogate now and then)."""
    around = unicode_text(max_size=max_size // 2)
    odd = sometimes(st.sampled_from(SURROGATES), st.sampled_from(ODD_PIECES), one_in=2)
    return st.tuples(around, odd, around).map("".join)


def sometimes(rare: st.SearchStrategy[T], usual: st.SearchStrategy[T], *, one_in: int) -> st.SearchStrategy[T]:
    """``rare`` about once in ``one_in`` draws, else ``usual``."""
    return st.integers(1, one_in).flatmap(lambda roll: rare if roll == 1 else usual)


def raw_json(text: str) -> str:
    """A stand-in for JSON text no Python value writes (``1e400``, 5,000 digits, nesting past the
    recursion limit): :func:`json_body` writes ``text`` in its place, ``json.dumps`` a string."""
    return f"\x00raw:{text.encode().hex()}\x00"


def json_body(document: Any, encoding: str = "ascii") -> bytes:
    """``document`` as a request body, each :func:`raw_json` stand-in as its text.

    ``ascii``: JSON with ``\\uXXXX`` escapes, a lone surrogate as ``\\ud800`` (as a browser's
    ``JSON.stringify`` writes it); ``utf-8``: the text as UTF-8, a lone surrogate as the three
    bytes a careless encoder writes (not UTF-8); ``raw-controls``: that, with control characters
    unescaped (JSON forbids them raw).
    """
    assert encoding in ENCODINGS, f"encoding {encoding!r}: one of {ENCODINGS}"
    text = RAW_JSON.sub(
        lambda m: bytes.fromhex(m.group(1)).decode(), json.dumps(document, ensure_ascii=encoding == "ascii")
    )
    if encoding == "raw-controls":
        text = CONTROL_ESCAPE.sub(lambda m: chr(int(m.group(0)[2:], 16)), text)
    return text.encode("utf-8", "surrogatepass")


def json_text(document: Any) -> str:
    """``document`` as JSON text (a string of JSON inside a body), its stand-ins written in place."""
    return json_body(document).decode()


encodings = sometimes(st.sampled_from(["utf-8", "raw-controls"]), st.just("ascii"), one_in=3)


# Numbers at the edges of what JSON decoders hold: 64-bit bounds, the largest and smallest floats, -0.
EDGE_NUMBERS = (-0.0, 2**53 + 1, 2**63 - 1, 2**63, -(2**63) - 1, 2**64, 10**300, 1.7976931348623157e308, 5e-324)
# And as written in a body: more digits than Python reads (4,300), past float's range, -0.
NUMBER_TEXTS = ("1e400", "-1e400", "1e-400", "-0", "-0.0", "0e0", "1E+308", "9" * 400 + ".5", "9" * 4300, "1" * 30)
HUGE_NUMBER_TEXTS = ("1" + "0" * 5000, "-" + "9" * 5000, "1" + "0" * 4300)  # no body with one is read
numbers = st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(EDGE_NUMBERS)
raw_numbers = sometimes(st.sampled_from(HUGE_NUMBER_TEXTS), st.sampled_from(NUMBER_TEXTS), one_in=8).map(raw_json)


@st.composite
def deep_json(draw: st.DrawFn, *, min_depth: int = 50, max_depth: int = 2000) -> str:
    """A :func:`raw_json` stand-in for a value nested ``[`` or ``{"a":`` ``min_depth``-``max_depth`` deep."""
    depth = draw(st.integers(min_depth, max_depth))
    opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
    leaf = draw(st.sampled_from(["0", '"\\ud800"', "1e400", "null", "{}"]))
    return raw_json(opener * depth + leaf + closer * depth)


plain_leaves = st.none() | st.booleans() | numbers | unicode_text()
json_values: st.SearchStrategy[Any] = st.recursive(
    sometimes(raw_numbers | deep_json(), plain_leaves, one_in=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(unicode_text(max_size=8), children, max_size=4),
    max_leaves=12,
)


@functools.cache
def page_urls(site: str, *, surrogates: bool = True) -> st.SearchStrategy[str]:
    """``site``'s page URLs with text over the whole of Unicode in the path, query and fragment,
    and now and then in the host (before or after the site's name)."""
    part = unicode_text(max_size=20, surrogates=surrogates)
    host = st.just(site) | part.map(lambda t: t + site) | part.map(lambda t: site + t)
    return st.builds("https://{}/{}?{}#{}".format, host, part, part, part)


@functools.cache
def referrers(*, surrogates: bool = True) -> st.SearchStrategy[str]:
    """Referrers with text over the whole of Unicode in every part (``android-app:`` too)."""
    part = unicode_text(max_size=20, surrogates=surrogates)
    scheme = st.sampled_from(["https", "http", "android-app", "javascript", ""])
    return st.builds("{}://{}/{}?q={}#{}".format, scheme, part, part, part, part)


VALID_TEXT = unicode_text(max_size=60, surrogates=False)
VALID_URLS = st.text("abc/-_%?=&#é", max_size=30).map(f"https://{SITE}/".__add__) | page_urls(SITE, surrogates=False)
VALID_OPTIONAL = {
    "r": st.sampled_from(["https://www.google.com/", "https://t.co/x", "", "android-app://x"])
    | referrers(surrogates=False),
    "ti": VALID_TEXT,
    "w": st.integers(0, 100_000),
    "l": unicode_text(max_size=35, surrogates=False),
    "z": unicode_text(max_size=64, surrogates=False),
    "p": st.dictionaries(
        unicode_text(min_size=1, max_size=64, surrogates=False), VALID_TEXT | st.integers(), max_size=5
    ),
    "e": st.integers(0, 86_400_000),
    "ld": st.integers(0, 3_600_000),
}


@st.composite
def valid_beacons(draw: st.DrawFn) -> dict[str, Any]:
    """A beacon the tracker could send for the demo site (sometimes with every optional field),
    its text over the whole of Unicode but for lone surrogates."""
    now = int(time.time() * 1000)
    sent = now + draw(st.integers(-60_000, 60_000))  # device clocks are off
    beacon: dict[str, Any] = {
        "id": str(draw(st.uuids(version=4))),
        "s": SITE,
        "u": draw(VALID_URLS),
        "te": sent - draw(st.integers(0, 3_600_000)),
        "ts": sent,
    }
    kind = draw(st.sampled_from(["pageview", "pageview", "event", "engagement"]))
    if kind != "pageview":
        beacon["k"] = kind
    if kind == "event":
        beacon["n"] = draw(unicode_text(min_size=1, max_size=40, surrogates=False))
    for key in draw(st.lists(st.sampled_from(sorted(VALID_OPTIONAL)), unique=True)):
        beacon[key] = draw(VALID_OPTIONAL[key])
    return beacon


# Properties with an odd character (half the time a lone surrogate) in a value, now and then in a name too.
odd_props = st.builds(
    lambda props, name, value: props | {name: value},
    st.dictionaries(unicode_text(min_size=1, max_size=64, surrogates=False), unicode_text(max_size=64), max_size=3),
    st.just("plan") | odd_text(max_size=64),
    odd_text() | sometimes(numbers | raw_numbers, odd_text(), one_in=4),
)
MUTATED_SITES = st.sampled_from(OTHER_SITES) | odd_text()
ODD_URLS = page_urls(SITE) | referrers()


@st.composite
def mutated_beacons(draw: st.DrawFn) -> dict[str, Any]:
    """A valid beacon with one wire field replaced by any JSON value, odd text or deep nesting,
    or removed; or a key of odd text added; or its properties, page URL or site changed."""
    beacon = draw(valid_beacons())
    key = draw(st.sampled_from(WIRE_KEYS))
    action = draw(
        st.sampled_from(
            ["replace", "remove", "site", "odd text", "odd text", "odd key", "props", "props", "url", "deep"]
        )
    )
    if action == "replace":
        beacon[key] = draw(json_values)
    elif action == "remove":
        beacon.pop(key, None)
    elif action == "site":
        beacon["s"] = draw(MUTATED_SITES)
    elif action == "odd text":
        beacon[key] = draw(odd_text())
    elif action == "odd key":
        beacon[draw(odd_text())] = draw(json_values)
    elif action == "props":
        beacon["p"] = draw(odd_props)
    elif action == "url":
        beacon[draw(st.sampled_from(["u", "r"]))] = draw(ODD_URLS)
    else:
        beacon[key] = draw(deep_json())
    return beacon


# A valid beacon but for its properties: the security review's case, drawn often on its own.
beacons_with_odd_props = st.builds(lambda beacon, props: beacon | {"p": props}, valid_beacons(), odd_props)
beacons = valid_beacons() | mutated_beacons() | beacons_with_odd_props


@functools.cache
def batches(max_size: int) -> st.SearchStrategy[list[Any]]:
    """Batches of up to ``max_size`` items, beacons or any JSON."""
    return st.lists(beacons | json_values, max_size=max_size)


@dataclass(frozen=True)
class Request:
    """One request to ``POST /api/event`` (or the Stats API): the body's bytes and its content type."""

    body: bytes
    content_type: str

    @property
    def items(self) -> list[Any]:
        """The items ingest sees in the body, if it decodes as JSON (as ``json.loads`` decodes bytes)."""
        try:
            document = json.loads(self.body)
        except (ValueError, RecursionError):
            return []
        return document if isinstance(document, list) else [document]

    @property
    def is_batch(self) -> bool:
        return self.body.lstrip()[:1] == b"["

    def __repr__(self) -> str:  # hypothesis shows failing examples: keep them short
        return f"Request({self.content_type!r}, {self.body[:200]!r})"


@functools.cache
def content_types(accepted: tuple[str, ...] = CONTENT_TYPES[:3]) -> st.SearchStrategy[str]:
    """A content type: usually one of ``accepted``, else any of :data:`CONTENT_TYPES`."""
    return st.sampled_from(accepted) | st.sampled_from(CONTENT_TYPES)


def any_bodies(draw: st.DrawFn, shape: str, *, max_body: int) -> bytes:
    """The bodies any endpoint may get: any JSON, any bytes, any text, JSON nested past the recursion limit."""
    if shape == "json":
        return json_body(draw(json_values), draw(encodings))
    if shape == "bytes":
        return draw(st.binary(max_size=300))
    if shape == "text":
        return draw(unicode_text(max_size=300)).encode("utf-8", "surrogatepass")
    assert shape == "nested", shape  # deeper than Python's recursion limit, still under the size cap
    return draw(st.sampled_from([b"[", b'{"p":'])) * draw(st.integers(500, max_body // 6))


@st.composite
def requests(draw: st.DrawFn, *, max_batch: int = 50, max_body: int = 65536) -> Request:
    """A request body of any kind, with a content type (usually one ingest accepts)."""
    shape = draw(st.sampled_from(["beacon", "beacon", "batch", "batch", "json", "bytes", "text", "huge", "nested"]))
    encoding = draw(encodings)
    if shape == "beacon":
        body = json_body(draw(beacons), encoding)
    elif shape == "batch":
        body = json_body(draw(batches(max_batch + 3)), encoding)
    elif shape == "huge":
        body = json_body(draw(valid_beacons()) | {"ti": "x" * max_body}, encoding)
    else:
        body = any_bodies(draw, shape, max_body=max_body)
    return Request(body, draw(content_types()))


@functools.cache
def domain_lists(site: str, other: str) -> st.SearchStrategy[str]:
    """``d`` as sent: one or more comma-separated domains, configured (in any case, with ``www.``),
    unknown, blank or odd; more than the ten ingest reads now and then."""
    odd = unicode_text(max_size=20, surrogates=False)
    one = st.sampled_from([site, f"www.{site}", f" {site.upper()} ", other, UNKNOWN_DOMAIN, "", " "]) | odd
    return st.lists(one, min_size=1, max_size=12).map(",".join)


def same(usual: st.SearchStrategy[T]) -> st.SearchStrategy[T]:
    """``usual`` as it is: :func:`or_odd`'s stand-in where nothing odd is wanted."""
    return usual


def or_odd(usual: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``usual``, or about one time in eight odd text or any JSON value."""
    return sometimes(odd_text() | json_values, usual, one_in=8)


@functools.cache
def plausible_bodies(*, site: str = SITE, other: str = OTHER_SITE) -> st.SearchStrategy[dict[str, Any]]:
    """Plausible's Events API body for ``site`` (and ``other``, a second configured site), in its
    short form (``n``, ``u``, ``d``: its tracker's) or its long one (``name``, ``url``, ``domain``):
    what a tracker sends (text over the whole of Unicode but for lone surrogates, properties now
    and then as the JSON text of an object: the API's older form), that with odd properties, or
    that with each value sometimes odd text, any JSON or a number past what Python reads, and keys
    of the other form beside (which of them wins). Accepted, refused and skipped events."""
    tracker_like = plausible_forms(site, other, odd=False)
    with_odd_props = st.builds(  # a tracker's body but for its properties: the security review's case
        lambda body, props: body | {"p" if "n" in body else "props": props},
        tracker_like,
        odd_props | odd_props.map(json_text),
    )
    return tracker_like | with_odd_props | plausible_forms(site, other, odd=True)


@functools.cache
def plausible_forms(site: str, other: str, *, odd: bool) -> st.SearchStrategy[dict[str, Any]]:
    """:func:`plausible_bodies` as a tracker sends them, or (``odd``) with odd values and keys."""
    maybe = or_odd if odd else same
    page = f"https://{site}/pricing?utm_source=news&token=secret#top"
    text = unicode_text(max_size=300, surrogates=False)
    props = st.dictionaries(text, text | numbers | (json_values if odd else st.nothing()), max_size=22)
    props |= odd_props if odd else st.nothing()
    amount = numbers | raw_numbers if odd else st.floats(0, 10**6) | st.integers(0, 10**6)
    values = {
        "name": maybe(st.sampled_from(["pageview", "engagement", "signup", "=cmd()", "404"]) | text),
        "url": maybe(
            st.sampled_from([page, f"https://{other}/", "javascript:x", "http://[::1"])
            | page_urls(site, surrogates=False)
        ),
        "domain": maybe(st.sampled_from([site, other, f"{site},{UNKNOWN_DOMAIN}"]) | domain_lists(site, other)),
        "referrer": maybe(
            st.sampled_from([None, "https://news.example/a?b=c", "android-app://x"]) | referrers(surrogates=False)
        ),
        "props": maybe(props | props.map(json_text)),
        "sd": maybe(
            st.integers(-5, 200) | unicode_text(max_size=4, surrogates=odd) | (raw_numbers if odd else st.nothing())
        ),
        "e": maybe(st.integers(-5, 100 * 86_400_000) | (raw_numbers if odd else st.nothing())),
        "interactive": maybe(st.booleans()),
        "revenue": maybe(st.fixed_dictionaries({"amount": amount, "currency": unicode_text(max_size=4)})),
        "hashMode": maybe(st.booleans()),
    }
    short_keys = {"n": "name", "u": "url", "d": "domain", "r": "referrer", "p": "props", "i": "interactive"}
    short_keys |= {"$": "revenue", "h": "hashMode", "sd": "sd", "e": "e"} | ({"m": "props"} if odd else {})
    short = {key: values[name] for key, name in short_keys.items()}
    forms = st.fixed_dictionaries(
        {k: short[k] for k in "nud"}, optional={k: short[k] for k in short if k not in "nud"}
    ) | st.fixed_dictionaries(
        {k: values[k] for k in ("name", "url")}, optional={k: values[k] for k in values if k not in ("name", "url")}
    )
    if not odd:
        return forms
    other_form = st.dictionaries(st.sampled_from([*short, "meta", *values]) | odd_text(), json_values, max_size=3)
    return st.builds(lambda body, extra: extra | body, forms, sometimes(other_form, st.just({}), one_in=4))


@st.composite
def plausible_requests(draw: st.DrawFn, *, site: str = SITE, other: str = OTHER_SITE) -> Request:
    """A Plausible body (:func:`plausible_bodies`), written in any of :data:`ENCODINGS`, with a content type."""
    body = json_body(draw(plausible_bodies(site=site, other=other)), draw(encodings))
    return Request(body, draw(content_types()))


def deep_filters(depth: int, op: str = "and") -> str:
    """A :func:`raw_json` stand-in for one filter nested ``depth`` levels of ``[op, [...]]`` deep."""
    return raw_json(f'["{op}",[' * depth + '["is","event:page",["/"]]' + "]]" * depth)


DIMENSION_NAMES = st.sampled_from([*DIMENSIONS, "event:props:plan"]) | unicode_text(max_size=12, surrogates=False).map(
    "event:props:".__add__
)


@functools.cache
def filters(*, odd: bool = True) -> st.SearchStrategy[Any]:
    """Stats API filters: ``[op, dimension, [values]]``, the values over the whole of Unicode,
    nested in ``and``/``or``/``not``; when ``odd``, each part now and then odd, or one filter
    14-2,000 levels deep."""
    maybe = or_odd if odd else same
    values = st.lists(unicode_text(max_size=40, surrogates=False) | st.sampled_from(["/", "(((", ".*", "%", "\\"]))
    one = st.tuples(maybe(st.sampled_from(FILTER_OPERATORS)), maybe(DIMENSION_NAMES), maybe(values)).map(list)
    modified = st.builds(lambda f, flag: [*f, {"case_sensitive": flag}], one, maybe(st.booleans()))
    nested = st.recursive(
        one | modified,
        lambda inner: (
            st.tuples(st.sampled_from(["and", "or"]), st.lists(inner, min_size=0 if odd else 1, max_size=3)).map(list)
            | st.tuples(st.just("not"), inner).map(list)
        ),
        max_leaves=8,
    )
    depths = st.sampled_from([15, 16, 17, 450]) | st.integers(14, 2000)  # the cap is 16; 450 once answered 500
    deep = st.builds(deep_filters, depths, st.sampled_from(["and", "or"]))
    return sometimes(deep, nested, one_in=5) if odd else nested


@functools.cache
def dates() -> st.SearchStrategy[str]:
    """A date or a date-time as the Stats API reads one, in range or not."""
    days = st.dates(dt.date(1999, 1, 1), dt.date(9001, 1, 1)) | st.dates()
    instants = st.datetimes(dt.datetime(1999, 1, 1), dt.datetime(9001, 1, 1)).map(lambda t: t.isoformat(sep=" "))
    return days.map(str) | instants | st.datetimes().map(lambda t: t.isoformat() + "Z")


def date_ranges() -> st.SearchStrategy[list[str]]:
    """Two ISO dates, the second 0-450 days after the first (past the 400 Tally answers now and then)."""
    first = st.dates(dt.date(2000, 1, 1), dt.date(8999, 1, 1))
    return st.builds(lambda day, days: [str(day), str(day + dt.timedelta(days=days))], first, st.integers(0, 450))


def ordered(query: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """``query`` as it is, or ordered by some of its own metrics and dimensions."""
    names = [name for key in ("metrics", "dimensions") for name in query.get(key, ()) if isinstance(name, str)]
    order = st.lists(st.tuples(st.sampled_from(names), st.sampled_from(["asc", "desc"])).map(list), max_size=2)
    return st.just(query) | order.map(lambda pairs: query | {"order_by": pairs}) if names else st.just(query)


@functools.cache
def stats_queries(*, site: str = SITE, other: str = OTHER_SITE, odd: bool = True) -> st.SearchStrategy[dict[str, Any]]:
    """A Stats API v2 query of Plausible's shape for ``site`` or ``other`` (two configured sites)
    or an unknown one; when ``odd``, each part now and then odd text, any JSON or a number past
    what Python reads, and sometimes a key of its own."""
    maybe = or_odd if odd else same
    flags = st.dictionaries(st.sampled_from(["time_labels", "total_rows", "imports"]), st.booleans())
    compare = st.sampled_from(["previous_period", "year_over_year"]) | date_ranges()
    count = st.integers(0, 20_000) | numbers | raw_numbers if odd else st.integers(1, 1000)
    days = st.dates(dt.date(2000, 1, 1), dt.date(8999, 1, 1)).map(str)
    any_dates = st.lists(dates(), max_size=3)
    order = st.lists(st.tuples(st.sampled_from(METRICS) | DIMENSION_NAMES, st.sampled_from(["asc", "desc"])).map(list))
    queries = st.fixed_dictionaries(
        {
            "site_id": maybe(st.sampled_from([site, site, site, other, UNKNOWN_DOMAIN])),
            "metrics": maybe(st.lists(st.sampled_from(METRICS), min_size=1, max_size=3, unique=True)),
            "date_range": maybe(
                st.sampled_from(RANGE_SHORTCUTS) | date_ranges() | (any_dates if odd else st.nothing())
            ),
        },
        optional={
            "dimensions": maybe(st.lists(DIMENSION_NAMES, max_size=2, unique=True)),
            "filters": maybe(st.lists(filters(odd=odd), max_size=3)),
            **({"order_by": or_odd(order)} if odd else {}),
            "include": maybe(flags | st.fixed_dictionaries({"compare": compare})),
            "pagination": maybe(st.fixed_dictionaries({}, optional={"limit": count, "offset": count})),
            "date": maybe(days | (dates() if odd else st.nothing())),
        },
    )
    if not odd:
        return queries.flatmap(ordered)
    own_key = st.dictionaries(unicode_text(max_size=10), json_values, min_size=1, max_size=1)
    return st.builds(lambda query, extra: extra | query, queries, sometimes(own_key, st.just({}), one_in=10))


@st.composite
def stats_requests(draw: st.DrawFn, *, max_body: int = 65536) -> Request:
    """A request body for ``POST /api/v2/query``: a query (:func:`stats_queries`) or any body at all."""
    shape = draw(sometimes(st.sampled_from(["json", "bytes", "text", "nested"]), st.just("query"), one_in=4))
    if shape == "query":
        body = json_body(draw(stats_queries(odd=False) | stats_queries()), draw(encodings))
    else:
        body = any_bodies(draw, shape, max_body=max_body)
    return Request(body, draw(content_types(("application/json",))))
