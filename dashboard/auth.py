"""Who may see which site: dashboard users, the viewer of a page, sessions.

Pure logic, no Streamlit: ``dashboard/login.py`` is the page's gate, ``dashboard/share_links.py``
the signed share links, ``dashboard/passwords.py`` the password hashes and
``dashboard/throttle.py`` the login throttle. Users come from ``dashboard.users`` in the config
plus the file that ``tally user`` manages (``<home>/dashboard/users.yaml``, mode 0600); a config
user wins over a file user of the same name. Passwords are stored only as scrypt hashes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from dashboard.passwords import hash_password, needs_rehash
from tally.private_files import folder_lock, write_private
from tally.settings import DashboardUser, Settings, SettingsError

log = logging.getLogger("tally.dashboard.auth")

USER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@-]{0,63}")
EVERY_SITE = "*"
ADMIN = "admin"
Login = Literal["password", "oidc", "share"]


# --- files under <home>/dashboard ------------------------------------------------------------


def state_dir(settings: Settings) -> Path:
    """Where the dashboard keeps its users file, share-link record and generated secret."""
    return settings.home_dir / "dashboard"


def users_path(settings: Settings) -> Path:
    return state_dir(settings) / "users.yaml"


def admin_password_path(settings: Settings) -> Path:
    return state_dir(settings) / "admin-password"


@contextmanager
def state_lock(settings: Settings) -> Iterator[None]:
    """Serialise read-modify-write of the dashboard's files between CLI commands (an exclusive flock)."""
    with folder_lock(state_dir(settings)):
        yield


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


def upgrade_password_hash(settings: Settings, user: DashboardUser, password: str) -> DashboardUser:
    """After a successful password login: the user with a hash at today's cost, saved in ``users.yaml``.

    Unchanged when the hash is current; when the user is defined in the config (which Tally does
    not rewrite: the log says to replace it with ``tally user hash``); or when the file's entry
    changed meanwhile. A new hash ends the user's other open sessions once (the session
    fingerprint follows the hash).
    """
    cost = settings.dashboard.password_scrypt_n
    if not needs_rehash(user.password_hash, n=cost):
        return user
    if any(u.name == user.name for u in settings.dashboard.users):
        log.warning(
            "config user has an old password hash",
            extra={"fields": {"user": user.name, "fix": "replace its password_hash with `tally user hash`"}},
        )
        return user
    new_hash = hash_password(password, n=cost)
    try:
        with state_lock(settings):
            users = read_file_users(settings)
            if not any(u.name == user.name and u.password_hash == user.password_hash for u in users):
                return user  # removed or changed since this login read it: keep what is there
            upgraded = [dataclasses.replace(u, password_hash=new_hash) if u.name == user.name else u for u in users]
            write_file_users(settings, upgraded)
    except OSError as e:  # a read-only home must not turn a correct password into a failed login
        log.error("password hash not upgraded", extra={"fields": {"user": user.name, "error": str(e)}})
        return user
    log.info("password hash upgraded", extra={"fields": {"user": user.name, "scrypt_n": cost}})
    return dataclasses.replace(user, password_hash=new_hash)


def user_for_email(users: Iterable[DashboardUser], email: object, *, verified: object) -> DashboardUser | None:
    """The one user whose ``email`` is the identity provider's (case-insensitive); None if ambiguous or unverified.

    ``verified`` is the provider's ``email_verified`` claim: it must be ``true``. A provider that
    leaves it out may hand out addresses it never checked, so a missing claim is refused too.
    """
    if verified is not True or not isinstance(email, str) or not email.strip():
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

    @property
    def sees_every_site(self) -> bool:
        """True for a ``["*"]`` grant: only such a viewer sees figures about the whole instance."""
        return self.sites is None


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


# --- sessions ----------------------------------------------------------------


def password_fingerprint(user: DashboardUser) -> str:
    """Changes when the user's password does, which ends their open sessions."""
    return hashlib.sha256(user.password_hash.encode()).hexdigest()[:16]
