"""Password-login sessions: a signed cookie in the browser, a record on the server.

The browser holds ``tally_session=<id>.<signature>`` (``HttpOnly``, ``SameSite=Lax``, ``Secure``
over https): a random id (``secrets.token_urlsafe(32)``) signed with HMAC-SHA256 under the
dashboard's key (:func:`dashboard.share_links.secret_key`, with its own signing context). The
server keeps one record per session in ``<home>/dashboard/sessions/<sha256 of the id>.json``
(mode 0600): user, password fingerprint, created, last seen, expiry. The id itself is never
stored, so a copy of the folder opens no session.

A session is valid while its record exists, it has not expired (``created`` plus
``dashboard.session_minutes``, the setting as it is now), its user still exists and their
password is the one it was made with. So logging out (the record is deleted), ``tally user
remove`` or a new password (the user's records are deleted, and the fingerprint no longer
matches anyway) and expiry end it in every tab at the next page run.

The forms that post to the login and logout routes carry a signed token too
(:func:`form_token`): bound to the session for logging out, short-lived for logging in.

Pure logic and files: no Streamlit, no Starlette.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from dashboard.auth import password_fingerprint, state_dir
from dashboard.share_links import secret_key
from tally.private_files import write_private
from tally.settings import DashboardUser, Settings

log = logging.getLogger("tally.dashboard.sessions")

COOKIE_NAME = "tally_session"
_COOKIE_CONTEXT = b"tally-session-v1."
_FORM_CONTEXT = b"tally-form-v1."
FORM_TOKEN_SECONDS = 6 * 3600  # a login form left open longer asks again
LAST_SEEN_EVERY_SECONDS = 300  # how often a session's last-seen time is written (not on every page run)
_RECORD_NAME_CHARS = 64  # sha256 hex


@dataclass(frozen=True)
class SessionRecord:
    """What the server keeps about one session (never the id or the cookie)."""

    user: str
    fingerprint: str  # of the password hash the session was made with
    created: float  # epoch seconds
    last_seen: float
    expires: float

    def expiry(self, minutes: int) -> float:
        """When it ends: its recorded expiry, or sooner if ``dashboard.session_minutes`` was lowered since."""
        return min(self.expires, self.created + minutes * 60)


def _sign(key: bytes, context: bytes, text: str) -> str:
    return hmac.new(key, context + text.encode("ascii"), hashlib.sha256).hexdigest()


def _record_name(session_id: str) -> str:
    return hashlib.sha256(session_id.encode("ascii")).hexdigest()


class Sessions:
    """The session records of one Tally home, and the cookies that point at them."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.folder: Path = state_dir(settings) / "sessions"

    # --- cookies ---------------------------------------------------------------------------

    def cookie_value(self, session_id: str) -> str:
        """The signed cookie value of a session id."""
        return f"{session_id}.{_sign(secret_key(self.settings), _COOKIE_CONTEXT, session_id)}"

    def session_id(self, cookie: str | None) -> str | None:
        """The session id inside a cookie whose signature is ours; None if missing, altered or malformed."""
        if not cookie or len(cookie) > 200 or not cookie.isascii():
            return None
        session_id, dot, signature = cookie.rpartition(".")
        if not dot or not session_id:
            return None
        expected = _sign(secret_key(self.settings), _COOKIE_CONTEXT, session_id)
        return session_id if hmac.compare_digest(expected, signature) else None

    # --- records ---------------------------------------------------------------------------

    def _path(self, session_id: str) -> Path:
        return self.folder / f"{_record_name(session_id)}.json"

    def create(self, user: DashboardUser, *, now: float) -> str:
        """Start a session for ``user``; return its id (put :meth:`cookie_value` of it in the cookie)."""
        self.purge_expired(now=now)
        session_id = secrets.token_urlsafe(32)
        expires = now + self.settings.dashboard.session_minutes * 60
        record = SessionRecord(user.name, password_fingerprint(user), now, now, expires)
        write_private(self._path(session_id), json.dumps(asdict(record)) + "\n")
        return session_id

    def read(self, session_id: str) -> SessionRecord | None:
        """The record of a session id; None if there is none (logged out, revoked) or it is unreadable."""
        try:
            return _parse(self._path(session_id).read_text())
        except FileNotFoundError:
            return None

    def user(self, cookie: str | None, users: Mapping[str, DashboardUser], *, now: float) -> DashboardUser | None:
        """The logged-in user of a cookie, if its session is current; None otherwise (a stale record is deleted)."""
        session_id = self.session_id(cookie)
        if session_id is None:
            return None
        record = self.read(session_id)
        if record is None:
            return None
        user = users.get(record.user)
        minutes = self.settings.dashboard.session_minutes
        current = user is not None and bool(user.password_hash) and record.fingerprint == password_fingerprint(user)
        if not current or not record.created <= now < record.expiry(minutes):
            self.delete(session_id)
            return None
        if now - record.last_seen >= LAST_SEEN_EVERY_SECONDS:
            self._touch(session_id, record, now)
        return user

    def _touch(self, session_id: str, record: SessionRecord, now: float) -> None:
        path = self._path(session_id)
        try:
            if path.exists():  # not brought back to life if a logout deleted it meanwhile
                write_private(path, json.dumps(asdict(record) | {"last_seen": now}) + "\n")
        except OSError as e:  # a read-only home must not log the user out
            log.error("session last-seen not written", extra={"fields": {"error": str(e)}})

    def delete(self, session_id: str) -> None:
        """End one session (logging out)."""
        self._path(session_id).unlink(missing_ok=True)

    def _records(self) -> list[tuple[Path, SessionRecord | None]]:
        if not self.folder.is_dir():
            return []
        found = []
        for path in self.folder.glob("*.json"):
            if len(path.stem) != _RECORD_NAME_CHARS:
                continue
            try:
                found.append((path, _parse(path.read_text())))
            except FileNotFoundError:
                continue  # deleted meanwhile
        return found

    def delete_user(self, name: str) -> int:
        """End every session of a user (removed, or a new password); return how many ended."""
        ended = 0
        for path, record in self._records():
            if record is not None and record.user == name:
                path.unlink(missing_ok=True)
                ended += 1
        return ended

    def purge_expired(self, *, now: float) -> int:
        """Delete expired and unreadable records; return how many."""
        minutes = self.settings.dashboard.session_minutes
        gone = 0
        for path, record in self._records():
            if record is None or now >= record.expiry(minutes):
                path.unlink(missing_ok=True)
                gone += 1
        return gone

    def active(self, *, now: float) -> list[SessionRecord]:
        """The records of sessions that have not expired (for ``tally user list`` and tests)."""
        minutes = self.settings.dashboard.session_minutes
        return [r for _, r in self._records() if r is not None and now < r.expiry(minutes)]

    # --- form tokens -----------------------------------------------------------------------

    def form_token(self, purpose: str, *, now: float, bound_to: str = "") -> str:
        """A token for a form that posts to ``purpose`` (login, logout), signed, bound to a session id if given."""
        issued = str(int(now))
        nonce = secrets.token_urlsafe(12)
        signed = f"{purpose}|{issued}|{nonce}|{_record_name(bound_to) if bound_to else ''}"
        return f"{issued}.{nonce}.{_sign(secret_key(self.settings), _FORM_CONTEXT, signed)}"

    def form_token_ok(self, token: str, purpose: str, *, now: float, bound_to: str = "") -> bool:
        """True if ``token`` came from :meth:`form_token` for this purpose (and session), and is recent."""
        parts = token.split(".") if token.isascii() and len(token) <= 200 else []
        if len(parts) != 3 or not parts[0].isdigit():
            return False
        issued, nonce, signature = parts
        signed = f"{purpose}|{issued}|{nonce}|{_record_name(bound_to) if bound_to else ''}"
        expected = _sign(secret_key(self.settings), _FORM_CONTEXT, signed)
        return hmac.compare_digest(expected, signature) and 0 <= now - int(issued) <= FORM_TOKEN_SECONDS


def _parse(text: str) -> SessionRecord | None:
    try:
        entry = json.loads(text)
        record = SessionRecord(
            user=str(entry["user"]),
            fingerprint=str(entry["fingerprint"]),
            created=float(entry["created"]),
            last_seen=float(entry["last_seen"]),
            expires=float(entry["expires"]),
        )
    except (ValueError, TypeError, KeyError):
        return None
    return record


def end_user_sessions(settings: Settings, name: str) -> int:
    """End every session of user ``name`` (``tally user remove`` / a new password); how many ended."""
    try:
        return Sessions(settings).delete_user(name)
    except OSError as e:
        # The fingerprint still ends them on a new password; a removed user has no sessions left to check.
        log.error("sessions not deleted", extra={"fields": {"user": name, "error": str(e)}})
        return 0
