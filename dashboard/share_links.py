"""Share links: read-only, signed, expiring and revocable, each for one site and one view.

A token is ``<payload>.<signature>`` in URL-safe base64. The payload is compact JSON (link id,
site, the view's query parameters, issued-at and expiry in epoch seconds); the signature is
HMAC-SHA256 of the encoded payload under the dashboard's secret key (``dashboard.secret_key``,
or one generated into ``<home>/dashboard/secret.key``). Every issued link is recorded in
``<home>/dashboard/share-links.json`` (id, site, view, creator, times; never the token);
revoking marks the record. A token whose id is not on record is refused too, so deleting the
record (or changing the key) revokes every link.

A link lends its creator's access, never more: it is made by a dashboard user who may see the
site, and it is refused as soon as that user is removed or no longer may see the site (checked
each time the link is opened).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, urlencode

from dashboard.auth import load_users, state_dir, state_lock, viewer_for_user
from dashboard.passwords import b64_url, unb64_url
from dashboard.view import QUERY_KEYS, from_query, to_query
from tally.changes import record_change
from tally.private_files import write_private
from tally.settings import Settings, SettingsError

TOKEN_VERSION = 1
MAX_TOKEN_CHARS = 4096
MAX_VIEW_CHARS = 2000
_SIGNING_CONTEXT = b"tally-share-v1."  # binds signatures to this use of the key
Refusal = Literal["tampered", "expired", "revoked", "unknown-link", "unknown-site", "creator-lost"]


class AccessDenied(Exception):
    """A share link that must not open; ``reason`` is shown to the visitor, ``kind`` is for code and tests."""

    def __init__(self, kind: Refusal, reason: str) -> None:
        super().__init__(reason)
        self.kind, self.reason = kind, reason


@dataclass(frozen=True)
class ShareGrant:
    """What a valid token grants: one site, one view, until ``expires_at``."""

    link_id: str
    site: str
    view: Mapping[str, str]  # the page's query parameters, including ``site``
    issued_at: int
    expires_at: int


@dataclass(frozen=True)
class ShareLink:
    """The record of an issued link (never the token)."""

    link_id: str
    site: str
    view: Mapping[str, str]
    creator: str
    issued_at: int
    expires_at: int
    revoked_at: int | None = None

    def status(self, now: float) -> Literal["active", "expired", "revoked"]:
        if self.revoked_at is not None:
            return "revoked"
        return "expired" if now >= self.expires_at else "active"


def parse_view(text: str, *, site: str) -> dict[str, str]:
    """A view's query string (``range=30d&page=/pricing``) as parameters with ``site`` set; ValueError if bad."""
    params = parse_qsl(text.lstrip("?"), keep_blank_values=True, strict_parsing=True) if text.strip("?") else []
    view: dict[str, str] = {}
    for key, value in params:
        if key in view:
            raise ValueError(f"--view: {key!r} appears twice")
        view[key] = value
    if "share" in view:
        raise ValueError("--view: a view cannot hold a 'share' parameter")
    if view.setdefault("site", site) != site:
        raise ValueError(f"--view names site {view['site']!r} but the link is for {site!r}")
    unknown = sorted(set(view) - QUERY_KEYS)
    if unknown:
        raise ValueError(f"--view: unknown parameter(s) {unknown}; a view uses {sorted(QUERY_KEYS)}")
    if len(urlencode(view)) > MAX_VIEW_CHARS:
        raise ValueError(f"--view: longer than {MAX_VIEW_CHARS} characters once encoded")
    return to_query(from_query(view, default_site=site))  # ViewError (a ValueError) names a bad value


def make_share_token(key: bytes, grant: ShareGrant) -> str:
    """The signed token of a grant."""
    payload = {
        "v": TOKEN_VERSION,
        "id": grant.link_id,
        "site": grant.site,
        "view": dict(grant.view),
        "iat": grant.issued_at,
        "exp": grant.expires_at,
    }
    encoded = b64_url(json.dumps(payload, separators=(",", ":"), sort_keys=True).encode())
    return f"{encoded}.{_signature(key, encoded)}"


def _signature(key: bytes, encoded_payload: str) -> str:
    return b64_url(hmac.new(key, _SIGNING_CONTEXT + encoded_payload.encode("ascii"), hashlib.sha256).digest())


_TAMPERED = "This share link is damaged or was altered; ask whoever sent it for a new link"


def verify_share_token(key: bytes, token: str) -> ShareGrant:
    """The grant inside a token whose signature is ours; AccessDenied("tampered") otherwise. Expiry is not checked."""
    encoded, dot, signature = token.partition(".")
    if not dot or len(token) > MAX_TOKEN_CHARS or not encoded.isascii():
        raise AccessDenied("tampered", _TAMPERED)
    # Compare the encoded signatures: base64 has several spellings of the same bytes.
    if not hmac.compare_digest(_signature(key, encoded).encode(), signature.encode("utf-8", "replace")):
        raise AccessDenied("tampered", _TAMPERED)
    try:
        payload = json.loads(unb64_url(encoded))
        view = payload["view"]
        if payload["v"] != TOKEN_VERSION or not isinstance(view, dict):
            raise ValueError(f"token version {payload['v']!r}")
        return ShareGrant(
            link_id=str(payload["id"]),
            site=str(payload["site"]),
            view={str(k): str(v) for k, v in view.items()},
            issued_at=int(payload["iat"]),
            expires_at=int(payload["exp"]),
        )
    except (ValueError, KeyError, TypeError) as e:  # signed by us, yet unreadable: a newer format
        raise AccessDenied("tampered", _TAMPERED) from e


def _utc(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def secret_key(settings: Settings) -> bytes:
    """The key that signs share links: ``dashboard.secret_key``, else one generated once (0600) under home."""
    configured = settings.dashboard.secret_key
    if configured:
        if len(configured) < 32:
            raise SettingsError(
                "dashboard.secret_key: use at least 32 random characters "
                "(python -c 'import secrets; print(secrets.token_urlsafe(32))'), or leave it empty to generate one"
            )
        return configured.encode()
    path = state_dir(settings) / "secret.key"
    if not path.exists():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:  # O_EXCL: when the dashboard and a CLI command race, one key wins and both read it
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_urlsafe(32) + "\n")
    key = path.read_text().strip()
    if len(key) < 32:
        raise SettingsError(f"{path}: the share-link key is too short; delete the file to generate a new one")
    return key.encode()


class ShareLinks:
    """Issue, check, list and revoke the share links of one Tally home."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.path: Path = state_dir(settings) / "share-links.json"

    def all(self) -> list[ShareLink]:
        """Every issued link, oldest first."""
        if not self.path.exists():
            return []
        try:
            entries = json.loads(self.path.read_text())
            return [ShareLink(**{**entry, "view": dict(entry["view"])}) for entry in entries]
        except (ValueError, TypeError, KeyError) as e:
            raise SettingsError(f"{self.path}: unreadable ({e}); delete it to revoke every share link") from e

    def _write(self, links: list[ShareLink]) -> None:
        write_private(self.path, json.dumps([dataclasses.asdict(link) for link in links], indent=1) + "\n")

    def create(
        self, *, site: str, view: Mapping[str, str], days: float, creator: str, now: float
    ) -> tuple[ShareLink, str]:
        """Record a new link for a configured site and return it with its token."""
        if self.settings.site(site) is None:
            known = ", ".join(s.site_id for s in self.settings.sites) or "none"
            raise ValueError(f"site {site!r} is not configured (configured: {known})")
        if view.get("site", site) != site or "share" in view:
            raise ValueError("the view must be of the link's own site and hold no 'share' parameter")
        if not self.creator_may_share(creator, site):
            raise ValueError(
                f"the creator {creator!r} is not a dashboard user who may see {site!r}; a link lends its creator's "
                "access, so name a user of `tally user list` who may see the site"
            )
        if not 0 < days <= 366:
            raise ValueError(f"a share link lasts between a minute and 366 days, not {days} days")
        link = ShareLink(
            link_id=secrets.token_hex(5),
            site=site,
            view={**view, "site": site},
            creator=creator,
            issued_at=int(now),
            expires_at=int(now + days * 86400),
        )
        token = make_share_token(
            secret_key(self.settings), ShareGrant(link.link_id, site, link.view, link.issued_at, link.expires_at)
        )
        with state_lock(self.settings):
            self._write([*self.all(), link])
        return link, token

    def revoke(self, link_id: str, *, now: float) -> ShareLink | None:
        """Mark a link revoked (it stops opening at once); None if no link has this id."""
        with state_lock(self.settings):
            links = self.all()
            found = next((link for link in links if link.link_id == link_id), None)
            if found is None:
                return None
            revoked = dataclasses.replace(found, revoked_at=found.revoked_at or int(now))
            self._write([revoked if link.link_id == link_id else link for link in links])
        return revoked

    def read(self, token: str, *, now: float) -> ShareGrant:
        """The grant of a token that may open now; AccessDenied with the reason otherwise."""
        grant = verify_share_token(secret_key(self.settings), token)
        if now >= grant.expires_at:
            raise AccessDenied("expired", f"This share link expired on {_utc(grant.expires_at)}; ask for a new one")
        record = next((link for link in self.all() if link.link_id == grant.link_id), None)
        if record is None:
            raise AccessDenied("unknown-link", "This share link is not known to this dashboard; ask for a new one")
        if record.revoked_at is not None:
            raise AccessDenied("revoked", "This share link was revoked by its owner")
        if self.settings.site(grant.site) is None or grant.view.get("site") != grant.site:
            raise AccessDenied("unknown-site", "This share link is for a site this dashboard does not serve")
        if record.site != grant.site or not self.creator_may_share(record.creator, grant.site):
            raise AccessDenied(
                "creator-lost", "Whoever made this share link no longer has access to its site; ask for a new link"
            )
        return grant

    def creator_may_share(self, creator: str, site: str) -> bool:
        """True if ``creator`` is a current dashboard user who may see ``site`` (a link lends no more)."""
        user = load_users(self.settings).get(creator)
        return user is not None and viewer_for_user(user, self.settings).may_see(site)


def share_url(base_url: str, token: str) -> str:
    """The address to send: the dashboard's page with ``?share=<token>``."""
    return f"{base_url.split('?')[0].rstrip('/')}/?{urlencode({'share': token})}"


def describe_view(view: Mapping[str, Any]) -> str:
    return urlencode({k: v for k, v in view.items() if k != "site"}, safe="/") or "(default view)"


def record_share_link(settings: Settings, link: ShareLink, *, actor: str, via: str) -> None:
    """A new link in the audit trail (:mod:`tally.changes`): its id, view, expiry and whose access it lends."""
    record_change(
        settings,
        actor=actor,
        via=via,
        site_id=link.site,
        subject="share link",
        action="create",
        detail=f"link {link.link_id}: {describe_view(link.view)}, until {_utc(link.expires_at)},"
        f" lends {link.creator}'s access",
    )
