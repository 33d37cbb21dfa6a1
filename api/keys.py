"""API keys: created by ``tally apikey create``, shown once, stored only as a hash, scoped to sites.

Two scopes: a key reads the sites it was created for (``--sites``); an admin key
(``--admin``) also adds, changes and removes sites (``/api/v1/sites``, docs/API.md). The scope
is fixed at creation: to change it, create a new key and revoke the old one.

A key reads ``tly_<id>_<secret>``: the id finds the record, the secret (32 random bytes) is
checked against its SHA-256 in constant time. A fast hash is right here, unlike for passwords:
the secret is random and long, so there is nothing to guess from the hash. Records live in
``<home>/api/keys.json`` (0600); revoking marks the record, so ``tally apikey list`` still shows it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from tally.private_files import folder_lock, write_private
from tally.settings import Settings

EVERY_SITE = "*"
KEY_FORMAT = re.compile(r"tly_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")
NAME_FORMAT = re.compile(r"[A-Za-z0-9][A-Za-z0-9 _.@-]{0,63}")


class ApiKeyError(ValueError):
    """A bad key name or site list, or an unknown key id: the message says which."""


@dataclass(frozen=True)
class ApiKey:
    """One key's record (never the key itself)."""

    key_id: str
    name: str
    sites: tuple[str, ...]
    secret_sha256: str
    created: str
    revoked: str = ""
    admin: bool = False  # may add, change and remove sites (records written before it have none: False)

    def may_read(self, site_id: str) -> bool:
        return not self.revoked and (EVERY_SITE in self.sites or site_id in self.sites)

    @property
    def may_manage_sites(self) -> bool:
        """True for a live admin key: it may add, change and remove sites."""
        return self.admin and not self.revoked


def keys_path(settings: Settings) -> Path:
    return settings.home_dir / "api" / "keys.json"


def load_keys(settings: Settings) -> dict[str, ApiKey]:
    """Every key record by id (revoked ones included); none when the file does not exist yet."""
    path = keys_path(settings)
    if not path.exists():
        return {}
    records = json.loads(path.read_text())
    return {r["key_id"]: ApiKey(**{**r, "sites": tuple(r["sites"])}) for r in records}


def _save(settings: Settings, keys: dict[str, ApiKey]) -> None:
    records = [dataclasses.asdict(k) for k in sorted(keys.values(), key=lambda k: k.created)]
    write_private(keys_path(settings), json.dumps(records, indent=1) + "\n")


def create_key(
    settings: Settings,
    *,
    name: str,
    sites: tuple[str, ...],
    now: dt.datetime,
    admin: bool = False,
    known_sites: Collection[str] | None = None,
) -> tuple[str, ApiKey]:
    """A new key for ``sites`` (configured site ids, or ``*``): the key text (shown once) and its record.

    ``admin``: the key may also manage sites; it needs no site to read. ``known_sites``: the sites
    configured now (the seed folded with the sites topic); default: ``sites:`` of conf/.
    """
    if not NAME_FORMAT.fullmatch(name):
        raise ApiKeyError(f"key name {name!r}: use letters, digits, spaces and _.@- (at most 64)")
    known = set(known_sites) if known_sites is not None else {s.site_id for s in settings.sites}
    unknown = [s for s in sites if s != EVERY_SITE and s not in known]
    if (not sites and not admin) or unknown:
        raise ApiKeyError(
            f"sites {', '.join(unknown) or '(none)'}: give configured site ids ({', '.join(sorted(known))}) or *"
            + ("" if unknown else ", or --admin for a key that manages sites")
        )
    key_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
    record = ApiKey(key_id, name, sites, _digest(secret), now.isoformat(timespec="seconds"), admin=admin)
    with folder_lock(keys_path(settings).parent):
        keys = load_keys(settings)
        keys[key_id] = record
        _save(settings, keys)
    return f"tly_{key_id}_{secret}", record


def revoke_key(settings: Settings, key_id: str, *, now: dt.datetime) -> ApiKey:
    """Mark a key revoked (at once for every API process: each reads the file when it changes)."""
    with folder_lock(keys_path(settings).parent):
        keys = load_keys(settings)
        if key_id not in keys:
            raise ApiKeyError(f"no API key with id {key_id!r}; `tally apikey list` shows them")
        keys[key_id] = dataclasses.replace(keys[key_id], revoked=now.isoformat(timespec="seconds"))
        _save(settings, keys)
    return keys[key_id]


def verify(keys: dict[str, ApiKey], presented: str) -> ApiKey | None:
    """The live record of a presented key, or None (unknown, malformed, wrong secret or revoked)."""
    match = KEY_FORMAT.fullmatch(presented)
    if match is None:
        return None
    record = keys.get(match.group(1))
    if record is None or record.revoked:
        return None
    return record if hmac.compare_digest(record.secret_sha256, _digest(match.group(2))) else None


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()
