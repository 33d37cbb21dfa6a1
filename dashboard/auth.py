"""Who may see which site: password hashes, dashboard users, the viewer of a page, login throttling.

Pure logic, no Streamlit: ``dashboard/login.py`` is the page's gate and ``dashboard/share_links.py``
the signed share links. Users come from ``dashboard.users`` in the config plus the file that
``tally user`` manages (``<home>/dashboard/users.yaml``, mode 0600); a config user wins over a
file user of the same name. Passwords are stored only as scrypt hashes (standard library).
"""

from __future__ import annotations

import base64
import binascii
import fcntl
import functools
import hashlib
import hmac
import logging
import os
import re
import secrets
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from tally.settings import DashboardUser, Settings, SettingsError

log = logging.getLogger("tally.dashboard.auth")

SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1  # 16 MiB and ~50 ms per check: costly to guess offline
_SCRYPT_MAX_MEMORY = 64 * 1024 * 1024  # refuse stored parameters that would cost more than this per check
USER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
EVERY_SITE = "*"
ADMIN = "admin"
Login = Literal["password", "oidc", "share"]


def b64_url(raw: bytes) -> str:
    """URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def unb64_url(text: str) -> bytes:
    """The bytes of :func:`b64_url` text; raises binascii.Error or ValueError on bad input."""
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def hash_password(password: str) -> str:
    """A self-describing scrypt hash: ``scrypt$n$r$p$salt$hash`` (URL-safe base64, random 16-byte salt)."""
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(
        password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, maxmem=_SCRYPT_MAX_MEMORY, dklen=32
    )
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${b64_url(salt)}${b64_url(digest)}"


def verify_password(password: str, stored: str) -> bool:
    """True if ``password`` matches ``stored``; a malformed or unaffordable stored hash is False, never an error."""
    try:
        scheme, n_text, r_text, p_text, salt_text, digest_text = stored.strip().split("$")
        n, r, p = int(n_text), int(r_text), int(p_text)
        salt, expected = unb64_url(salt_text), unb64_url(digest_text)
    except (ValueError, binascii.Error):
        return False
    affordable = n > 1 and n & (n - 1) == 0 and 1 <= r <= 32 and 1 <= p <= 16 and 128 * n * r <= _SCRYPT_MAX_MEMORY
    if scheme != "scrypt" or not affordable or not salt or len(expected) < 16:
        return False
    try:
        actual = hashlib.scrypt(
            password.encode(), salt=salt, n=n, r=r, p=p, maxmem=2 * _SCRYPT_MAX_MEMORY, dklen=len(expected)
        )
    except (ValueError, MemoryError):
        return False
    return hmac.compare_digest(actual, expected)


@functools.cache
def _decoy_hash() -> str:
    return hash_password(secrets.token_urlsafe(16))


def authenticate(users: Mapping[str, DashboardUser], name: str, password: str) -> DashboardUser | None:
    """The user if name and password match; None otherwise, after the same work either way (no enumeration)."""
    user = users.get(name)
    stored = user.password_hash if user and user.password_hash else _decoy_hash()
    matches = verify_password(password, stored)
    return user if user is not None and user.password_hash and matches else None


# --- files under <home>/dashboard ------------------------------------------------------------


def state_dir(settings: Settings) -> Path:
    """Where the dashboard keeps its users file, share-link record and generated secret."""
    return settings.home_dir / "dashboard"


def users_path(settings: Settings) -> Path:
    return state_dir(settings) / "users.yaml"


def admin_password_path(settings: Settings) -> Path:
    return state_dir(settings) / "admin-password"


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` atomically with a 0600 file (readers see the old or the new file, never half)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


@contextmanager
def state_lock(settings: Settings) -> Iterator[None]:
    """Serialise read-modify-write of the dashboard's files between CLI commands (an exclusive flock)."""
    folder = state_dir(settings)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


# --- users -----------------------------------------------------------------------------------


def _user_from(path: Path, index: int, entry: Any) -> DashboardUser:
    where = f"{path}: users[{index}]"
    if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
        raise SettingsError(f"{where}: expected a mapping with a 'name'; fix the file or recreate it with `tally user`")
    unknown = set(entry) - {"name", "password_hash", "sites", "email"}
    sites = entry.get("sites", [])
    if unknown or not isinstance(sites, list) or not all(isinstance(s, str) for s in sites):
        raise SettingsError(f"{where}: unknown keys {sorted(unknown)} or 'sites' is not a list of site ids")
    return DashboardUser(
        name=entry["name"],
        password_hash=str(entry.get("password_hash", "")),
        sites=tuple(sites),
        email=str(entry.get("email", "")),
    )


def read_file_users(settings: Settings) -> tuple[DashboardUser, ...]:
    """The users ``tally user add`` stored; none if the file does not exist yet."""
    path = users_path(settings)
    if not path.exists():
        return ()
    try:
        loaded = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise SettingsError(f"{path}: not valid YAML ({e}); fix the file or recreate it with `tally user`") from e
    entries = loaded.get("users", []) if isinstance(loaded, Mapping) else None
    if not isinstance(entries, list):
        raise SettingsError(f"{path}: expected 'users:' holding a list; fix the file or recreate it with `tally user`")
    return tuple(_user_from(path, i, entry) for i, entry in enumerate(entries))


def write_file_users(settings: Settings, users: Iterable[DashboardUser]) -> None:
    """Store the CLI-managed users (hashes only) in ``users.yaml``, mode 0600."""
    entries = [
        {
            "name": u.name,
            "password_hash": u.password_hash,
            "sites": list(u.sites),
            **({"email": u.email} if u.email else {}),
        }
        for u in users
    ]
    header = "# Dashboard users managed by `tally user add/remove`. Passwords are scrypt hashes.\n"
    write_private(users_path(settings), header + yaml.safe_dump({"users": entries}, sort_keys=False))


def load_users(settings: Settings) -> dict[str, DashboardUser]:
    """Every user who may log in, by name: config users first, then the file's (a config user wins)."""
    users = {u.name: u for u in settings.dashboard.users}
    for user in read_file_users(settings):
        if user.name in users:
            log.warning("file user ignored", extra={"fields": {"user": user.name, "reason": "defined in config"}})
            continue
        users[user.name] = user
    return users


def user_for_email(users: Iterable[DashboardUser], email: object, *, verified: object = None) -> DashboardUser | None:
    """The one user whose ``email`` is the identity provider's (case-insensitive); None if unverified or ambiguous."""
    if not isinstance(email, str) or not email.strip() or verified is False:
        return None
    wanted = email.strip().casefold()
    found = [u for u in users if u.email and u.email.strip().casefold() == wanted]
    return found[0] if len(found) == 1 else None


def oidc_providers(auth_section: Mapping[str, Any]) -> list[str | None]:
    """Providers ``st.login`` can use: each ``[auth.<name>]`` table, else the default (None) if ``[auth]`` has one."""
    named = sorted(key for key, value in auth_section.items() if isinstance(value, Mapping))
    if named:
        return list(named)
    return [None] if "client_id" in auth_section and "server_metadata_url" in auth_section else []


# --- the viewer of a page --------------------------------------------------------------------


@dataclass(frozen=True)
class Viewer:
    """Who looks at the page and what they may see.

    ``sites`` None means every configured site (a ``["*"]`` grant); ``configured_sites`` are the
    sites of the config when the viewer was made, so a grant of a removed site shows nothing.
    A share link's viewer is read-only and pinned to the link's view (its query parameters).
    """

    name: str
    sites: frozenset[str] | None
    configured_sites: frozenset[str]
    pinned_view: Mapping[str, str] | None = None
    read_only: bool = False
    login: Login = "password"
    expires_at: float | None = None  # a share link's expiry, epoch seconds

    def may_see(self, site_id: str) -> bool:
        """True if this viewer may see the site (it must be configured and granted)."""
        return site_id in self.configured_sites and (self.sites is None or site_id in self.sites)


def configured_sites(settings: Settings) -> frozenset[str]:
    return frozenset(s.site_id for s in settings.sites)


def viewer_for_user(user: DashboardUser, settings: Settings, *, login: Login = "password") -> Viewer:
    """The viewer of a logged-in user: their granted sites, among the configured ones."""
    sites = None if EVERY_SITE in user.sites else frozenset(user.sites)
    return Viewer(name=user.name, sites=sites, configured_sites=configured_sites(settings), login=login)


def visible_sites(viewer: Viewer, settings: Settings) -> list[str]:
    """The configured sites this viewer may see, in config order (the site picker's options)."""
    return [s.site_id for s in settings.sites if viewer.may_see(s.site_id)]


def effective_query(viewer: Viewer, query: Mapping[str, str]) -> dict[str, str]:
    """The query parameters the page must show: a share link's pinned view, else the URL's own (minus ``share``)."""
    if viewer.pinned_view is not None:
        return dict(viewer.pinned_view)
    return {key: value for key, value in query.items() if key != "share"}


# --- sessions and brute force ----------------------------------------------------------------


def password_fingerprint(user: DashboardUser) -> str:
    """Changes when the user's password does, which ends their open sessions."""
    return hashlib.sha256(user.password_hash.encode()).hexdigest()[:16]


def session_record(user: DashboardUser, now: float) -> dict[str, Any]:
    """What the page keeps in ``st.session_state`` for a password login (no secret)."""
    return {"user": user.name, "since": now, "fingerprint": password_fingerprint(user)}


def session_user(
    record: object, users: Mapping[str, DashboardUser], *, now: float, minutes: int
) -> DashboardUser | None:
    """The logged-in user if the session record is current: user still exists, same password, not expired."""
    if not isinstance(record, Mapping):
        return None
    user = users.get(str(record.get("user")))
    since = record.get("since")
    if user is None or not user.password_hash or not isinstance(since, int | float):
        return None
    if not 0 <= now - since <= minutes * 60 or record.get("fingerprint") != password_fingerprint(user):
        return None
    return user


class LoginThrottle:
    """Failed logins per user name (existing or not, so it reveals nothing) in a sliding window.

    Shared by every browser session of the dashboard process: reloading the page does not
    reset it. It bounds guessing at ``max_failures`` per name per window.
    """

    def __init__(self, *, max_failures: int = 10, window_seconds: float = 900.0, max_names: int = 10_000) -> None:
        self.max_failures, self.window_seconds, self.max_names = max_failures, window_seconds, max_names
        self._failures: OrderedDict[str, list[float]] = OrderedDict()
        self._lock = threading.Lock()

    def blocked_for(self, name: str, now: float) -> float:
        """Seconds until this name may try again; 0 when it may try now."""
        with self._lock:
            recent = [t for t in self._failures.get(name[:64], []) if now - t < self.window_seconds]
            if len(recent) < self.max_failures:
                return 0.0
            return recent[-self.max_failures] + self.window_seconds - now

    def failed(self, name: str, now: float) -> None:
        with self._lock:
            key = name[:64]
            recent = [t for t in self._failures.pop(key, []) if now - t < self.window_seconds]
            self._failures[key] = [*recent, now][-self.max_failures :]
            while len(self._failures) > self.max_names:  # names are attacker-chosen: bound the memory
                self._failures.popitem(last=False)

    def succeeded(self, name: str) -> None:
        with self._lock:
            self._failures.pop(name[:64], None)
