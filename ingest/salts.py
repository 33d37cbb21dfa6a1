"""Daily rotating salts for visitor ids. Yesterday's salt is deleted, so ids cannot be re-linked.

Salts are files under ``<home>/salts`` created atomically, so every ingest worker on the host
uses the same salt for the same day.
"""

from __future__ import annotations

import datetime as dt
import os
import secrets
from pathlib import Path

DAY_MS = 86_400_000


class SaltStore:
    """Hands out today's salt (UTC day) and deletes older ones."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._cache: tuple[int, bytes] | None = None  # (UTC day number, its salt)

    def salt_for(self, ts_ms: int) -> bytes:
        """The salt of the UTC day containing ``ts_ms`` (server receive time)."""
        day_number = ts_ms // DAY_MS
        if self._cache and self._cache[0] == day_number:
            return self._cache[1]
        day = dt.datetime.fromtimestamp(ts_ms / 1000, tz=dt.UTC).date().isoformat()
        salt = self._load_or_create(day)
        self._cache = (day_number, salt)
        self._delete_older_than(day)
        return salt

    def _load_or_create(self, day: str) -> bytes:
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{day}.salt"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return bytes.fromhex(path.read_text().strip())
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
            f.flush()
            os.fsync(f.fileno())
        return bytes.fromhex(path.read_text().strip())

    def _delete_older_than(self, day: str) -> None:
        for old in self.folder.glob("*.salt"):
            if old.stem < day:
                old.unlink(missing_ok=True)
