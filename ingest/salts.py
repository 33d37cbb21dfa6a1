"""Rotating salts for visitor ids. A period's salt is deleted when it ends, so ids cannot be re-linked.

Salts are files under ``<home>/salts``, one per UTC day (and, for sites whose ``salt_period`` is a
week or a month, one per ISO week or calendar month: :mod:`tally.salt_periods`), shared by every
ingest worker on the host. A salt file appears whole or not at all: it is written to a temporary file, fsync'd, then
linked into place (``os.link`` fails if the name exists, so the first writer wins and racing
processes all read its salt). A salt shorter than :data:`MIN_SALT_BYTES` is never used: with an
empty key, ``visitor_id = HMAC(salt, site|IP|UA)`` is computable by anyone. A short file left
by a crash (or an older Tally, which wrote after creating) is replaced, under a lock.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import logging
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tally.log import kv
from tally.salt_periods import SALT_PERIODS, period_key, same_kind

DAY_MS = 86_400_000
MIN_SALT_BYTES = 32

log = logging.getLogger("tally.ingest.salts")


class BadSalt(RuntimeError):
    """No usable salt could be read or made: ingest must not hash visitors with it."""


class SaltStore:
    """Hands out the current salt of a period (a UTC day by default) and deletes older ones of its kind."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        # period -> (UTC day number, its salt); only a good one
        self._cache: dict[str, tuple[int, bytes]] = {}

    def salt_for(self, ts_ms: int, period: str = "day") -> bytes:
        """The salt of the period (``day``, ``week``, ``month``) containing ``ts_ms`` (server receive time)."""
        day_number = ts_ms // DAY_MS
        cached = self._cache.get(period)
        if cached and cached[0] == day_number:
            return cached[1]
        day = dt.datetime.fromtimestamp(ts_ms / 1000, tz=dt.UTC).date()
        salt = self._load_or_create(period_key(day, period))
        assert len(salt) >= MIN_SALT_BYTES, "a short salt must never be used, let alone cached"
        self._cache[period] = (day_number, salt)
        self._delete_ended(day)
        return salt

    def _load_or_create(self, key: str) -> bytes:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{key}.salt"
        salt = _read(path)
        if salt is not None:
            return salt
        # Locked so that a bad file is replaced once, not by each process in turn (os.link alone
        # makes racing writers agree on a missing file, but not on which bad file to remove).
        with self._exclusive():
            salt = _read(path)  # another process may have made it meanwhile
            if salt is not None:
                return salt
            if path.exists():
                size = path.stat().st_size
                log.error("unusable salt file replaced", extra=kv(path=str(path), bytes=size, needed=MIN_SALT_BYTES))
                path.unlink()
            self._publish(path, key)
        salt = _read(path)
        if salt is None:
            raise BadSalt(f"{path} holds no usable salt right after it was written; check the disk under {self.folder}")
        return salt

    def _publish(self, path: Path, key: str) -> None:
        """Write a new salt beside ``path``, fsync it, and link it into place unless one is there already."""
        temporary = self.folder / f"{key}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(MIN_SALT_BYTES))
                f.flush()
                os.fsync(f.fileno())
            # Atomic, and refuses an existing name: the first writer wins, and everyone reads its salt.
            with contextlib.suppress(FileExistsError):
                os.link(temporary, path)
            _fsync_dir(self.folder)
        finally:
            temporary.unlink(missing_ok=True)

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        with open(self.folder / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _delete_ended(self, day: dt.date) -> None:
        """Delete the salts (and leftover temporary files) of every period, of every kind, that ended
        before ``day``: also a week's or a month's that no site uses any more."""
        current = [period_key(day, kind) for kind in SALT_PERIODS]
        for old in [*self.folder.glob("*.salt"), *self.folder.glob("*.tmp")]:
            name = old.name.partition(".")[0]
            if any(same_kind(name, key) and name < key for key in current):
                old.unlink(missing_ok=True)


def _read(path: Path) -> bytes | None:
    """The salt in ``path``; None if there is none, or if it is shorter than :data:`MIN_SALT_BYTES`."""
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    try:
        salt = bytes.fromhex(text)
    except ValueError:
        salt = b""
    return salt if len(salt) >= MIN_SALT_BYTES else None


def _fsync_dir(folder: Path) -> None:
    """Make a new name in ``folder`` durable (the file's own fsync does not cover its directory entry)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
