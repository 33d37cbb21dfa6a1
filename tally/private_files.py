"""Small private state files (users, share links, API keys): written whole, 0600, under a lock.

Each is replaced atomically, so a reader sees the old file or the new one, never half of one;
read-modify-write sequences of two commands are serialised by an exclusive flock on the folder.
"""

from __future__ import annotations

import fcntl
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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
def folder_lock(folder: Path) -> Iterator[None]:
    """Serialise read-modify-write of the files of ``folder`` between processes (an exclusive flock)."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock
