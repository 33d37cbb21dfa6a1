"""What Tally keeps of a visitor's URLs: the page without secrets, the referrer as origin and path.

A URL can carry far more than the page it names: password-reset and session tokens, e-mail
addresses, a search engine's query terms, ``user:password@`` before the host. Of a page URL Tally
keeps the scheme, host and port, the path, the query parameters the reports read (``utm_*`` and
the ad click ids) plus those its site allows (``sites[].query_params``), and the fragment only for
a site that routes by it (``hash_routing``), without the fragment's own query. Of a referrer it
keeps the origin and path. Everything the reports derive from the rest (source, channel, search
engine) is worked out from the full URLs before they are cut (``ingest.enrich``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import SplitResult, parse_qs, unquote, unquote_plus, urlsplit, urlunsplit

from ingest.beacon import neutralise_formula

UTM_PARAMS = ("utm_source", "utm_medium", "utm_campaign", "utm_term", "utm_content")
CLICK_ID_PARAMS = ("gclid", "fbclid", "msclkid", "ttclid", "twclid", "li_fat_id")
TRACKED_PARAMS = frozenset(UTM_PARAMS + CLICK_ID_PARAMS)  # kept on every site: the reports read them


class EnrichError(ValueError):
    """The beacon is well-formed but its content cannot be accepted (e.g. a non-http URL)."""


@dataclass(frozen=True)
class PageUrl:
    url: str  # as stored: no userinfo, only the allowed query parameters
    hostname: str
    path: str
    query: dict[str, str]  # the allowed parameters' first non-empty values


def split_url(url: str) -> SplitResult | None:
    """``urlsplit``, or None for text it cannot split (``http://[::1``: an unclosed IPv6 host)."""
    try:
        return urlsplit(url.strip())
    except ValueError:
        return None


def host_and_port(netloc: str) -> str:
    """The network location without ``user:password@``, lower case: ``u:p@Shop.Example:81`` -> ``shop.example:81``."""
    return netloc.rpartition("@")[2].lower()


def _param_name(pair: str) -> str:
    name = pair.partition("=")[0]
    return unquote_plus(name) if "%" in name or "+" in name else name


def allowed_query(query: str, site_params: tuple[str, ...] = ()) -> str:
    """The query string with only the tracked and the site's own parameters, each as it was sent.

    ``token=abc&utm_source=news&email=a%40b.example`` -> ``utm_source=news``.
    """
    if not query:
        return ""
    return "&".join(
        pair for pair in query.split("&") if (name := _param_name(pair)) in TRACKED_PARAMS or name in site_params
    )


def route_fragment(fragment: str) -> str:
    """A hash-routed page's route (``/app/2`` of ``#/app/2?token=x``); none for a fragment of parameters.

    A fragment such as ``access_token=…&state=…`` (OAuth's implicit flow) is data, not a route.
    """
    route = fragment.partition("?")[0]
    return "" if "=" in unquote(route) else route


@lru_cache(maxsize=16384)  # pages repeat: most beacons of a site share few URLs
def normalise_url(url: str, *, hash_routing: bool = False, query_params: tuple[str, ...] = ()) -> PageUrl:
    """Keep http(s) URLs only, without userinfo, with the allowed query parameters only; drop the
    fragment unless the site routes by hash. ``query_params``: the site's own allowed parameters.

    The result is cached and shared: callers must not modify ``query``.
    """
    parts = split_url(url)
    if parts is None:
        raise EnrichError("url is not a valid URL (an unclosed [ in its host?)")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise EnrichError(f"url must be an absolute http(s) URL, got scheme {parts.scheme!r}")
    fragment = route_fragment(parts.fragment) if hash_routing else ""
    path = (parts.path or "/") + (f"#{fragment}" if fragment else "")
    kept = allowed_query(parts.query, query_params)
    query = {k: v[0] for k, v in parse_qs(kept).items() if v}
    clean = urlunsplit((parts.scheme, host_and_port(parts.netloc), parts.path or "/", kept, fragment))
    return PageUrl(clean, parts.hostname.lower(), neutralise_formula(path), query)


def stored_referrer(referrer: str | None) -> str | None:
    """The referrer as stored: origin and path (``https://mail.example/inbox``), no query,
    fragment or userinfo. None when it names no host (``data:…``, ``about:blank``) or is no web or app
    referrer (``javascript:…``)."""
    parts = split_url(referrer) if referrer else None
    if parts is None or not parts.hostname or parts.scheme not in ("http", "https", "android-app"):
        return None
    return urlunsplit((parts.scheme, host_and_port(parts.netloc), parts.path, "", ""))
