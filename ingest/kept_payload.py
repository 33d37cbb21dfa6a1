"""What a dead letter keeps of a refused payload: never more of a URL than an accepted event keeps.

A refusal keeps its payload for recovery (``tally.deadletter``), but a URL in it may carry a token,
an e-mail address or a search query, and dead letters are kept for weeks. So the payload is cut
the way an accepted event is (:mod:`ingest.urls`), always:

- the page URL (``u``, or Plausible's ``url``): scheme, host and port, path, and the query
  parameters an accepted event keeps (the tracked ones and the site's ``query_params``); the
  fragment only for a ``hash_routing`` site's route;
- the referrer (``r``, ``referrer``): origin and path, or nothing when an event would keep none;
- any other text, and a body that is not JSON at all (or a too-large body's head): each URL in it
  without userinfo, query or fragment.

An item is cut field by field and written again as JSON; bytes that do not decode as JSON are cut
as text, so the payload stays recoverable in the same form it came in.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ingest.urls import EnrichError, normalise_url, stored_referrer
from tally.settings import SiteSettings

PAGE_KEYS = ("u", "url")
REFERRER_KEYS = ("r", "referrer")
# A scheme and "//" as text, JSON-escaped (``https:\/\/``) or percent-encoded (``https%3A%2F%2F``),
# then the rest of the URL up to a space, a quote or a bracket.
URL_IN_TEXT = re.compile(r"(?i)\b[a-z][a-z0-9+.-]{0,31}(?::|%3A)(?:\\?/|%2F){2}[^\s\"'<>]*")
URL_TAIL = re.compile(r"(?i)[?#]|%3F|%23")  # where the query or the fragment begins, encoded or not
URL_HOST_END = re.compile(r"(?i)\\?/|%2F")  # after the "//": where the host ends and the path begins
SCHEME_SEPARATOR = re.compile(r"(?i)(?::|%3A)(?:\\?/|%2F){2}")


def cut_url_text(url: str) -> str:
    """One URL found in text, without userinfo, query or fragment: ``https://u:p@a.example/x?t=1#y``
    -> ``https://a.example/x``."""
    separator = SCHEME_SEPARATOR.search(url)
    assert separator is not None, "URL_IN_TEXT only matches text with a scheme and //"
    head, rest = url[: separator.end()], url[separator.end() :]
    tail = URL_TAIL.search(rest)
    rest = rest[: tail.start()] if tail else rest
    host_end = URL_HOST_END.search(rest)
    host, path = (rest[: host_end.start()], rest[host_end.start() :]) if host_end else (rest, "")
    return head + host.rpartition("@")[2] + path


def cut_text(text: str) -> str:
    """``text`` with every URL in it cut by :func:`cut_url_text`."""
    return URL_IN_TEXT.sub(lambda m: cut_url_text(m.group(0)), text) if "/" in text or "%" in text else text


def kept_page_url(url: str, site: SiteSettings | None) -> str:
    """The page URL as an accepted event of ``site`` keeps it; one that no event would accept, cut as text."""
    try:
        return normalise_url(
            url,
            hash_routing=bool(site and site.hash_routing),
            query_params=site.query_params if site else (),
        ).url
    except EnrichError:
        return cut_text(url.partition("?")[0].partition("#")[0])


def kept_value(value: Any) -> Any:
    """Any decoded JSON value with the URLs in its text cut (without recursion: it may nest deeply)."""
    if isinstance(value, str):
        return cut_text(value)
    if not isinstance(value, dict | list):
        return value
    # Rebuilt bottom-up from an explicit stack: a copy of each container, its items filled in place.
    root: list[Any] = [value]
    pending: list[tuple[Any, Any]] = [(root, 0)]
    while pending:
        holder, slot = pending.pop()
        item = holder[slot]
        if isinstance(item, str):
            holder[slot] = cut_text(item)
        elif isinstance(item, dict):
            copy = {cut_text(k): v for k, v in item.items()}
            holder[slot] = copy
            pending.extend((copy, k) for k in copy)
        elif isinstance(item, list):
            copy_list = list(item)
            holder[slot] = copy_list
            pending.extend((copy_list, i) for i in range(len(copy_list)))
    return root[0]


def kept_item(item: Any, site: SiteSettings | None) -> Any:
    """One refused item (an event object, or whatever a batch held) as its dead letter keeps it."""
    if not isinstance(item, dict):
        return kept_value(item)
    kept: dict[str, Any] = {}
    for key, value in item.items():
        if key in PAGE_KEYS and isinstance(value, str):
            kept[key] = kept_page_url(value, site)
        elif key in REFERRER_KEYS and isinstance(value, str):
            kept[key] = stored_referrer(value)
        else:
            kept[key] = kept_value(value)
    return kept


def kept_payload(payload: Any, site: SiteSettings | None = None) -> bytes:
    """The bytes a dead letter keeps of a refused payload: a decoded item, or a request's whole body."""
    if not isinstance(payload, bytes):
        return json.dumps(kept_item(payload, site), default=str).encode()
    try:
        decoded = json.loads(payload)
        kept = [kept_item(item, site) for item in decoded] if isinstance(decoded, list) else kept_item(decoded, site)
        if kept == decoded:
            return payload  # nothing to cut: the bytes as they came
        return json.dumps(kept, ensure_ascii=False).encode("utf-8", "backslashreplace")
    except (ValueError, RecursionError):  # not JSON, a head cut short, or nested too deep to write again
        return cut_text(payload.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
