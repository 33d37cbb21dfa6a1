"""A local, fsync'd, append-only spool for events Kafka could not take right now.

Ingest answers 202 only when an event is safe: acknowledged by Kafka, or written here. The
replayer sends spooled records to Kafka in order when the broker is back, then truncates.
Each worker owns one file and holds an exclusive lock on it; a file whose owner died is
unlocked, and any worker adopts and replays it. Replays may duplicate an event that Kafka
had in fact stored; ``event_id`` deduplication downstream makes that harmless.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO

Record = tuple[str, bytes | None, bytes]  # topic, key, value


def _encode(record: Record) -> bytes:
    topic, key, value = record
    line = {"t": topic, "k": key.decode() if key else None, "v": base64.b64encode(value).decode()}
    return json.dumps(line, separators=(",", ":")).encode() + b"\n"


def _decode(line: bytes) -> Record | None:
    try:
        data = json.loads(line)
        return data["t"], data["k"].encode() if data["k"] else None, base64.b64decode(data["v"])
    except (ValueError, KeyError, TypeError):
        return None  # a torn last line from a crash mid-write: it was never acknowledged


class Spool:
    """This worker's spool file, plus adoption of files left by workers that died."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / f"{os.getpid()}-{uuid.uuid4().hex[:8]}.spool"
        self._file: IO[bytes] = open(self.path, "ab")  # noqa: SIM115 - held open for the process lifetime
        fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.spooled = 0  # records in our file not yet replayed

    def append(self, records: list[Record]) -> None:
        """Write records durably (fsync) before the request is acknowledged."""
        self._file.write(b"".join(_encode(r) for r in records))
        self._file.flush()
        os.fsync(self._file.fileno())
        self.spooled += len(records)

    def read_own(self, offset: int) -> tuple[list[Record], int]:
        """Records of our own file from byte ``offset``, and the offset after them."""
        with open(self.path, "rb") as f:
            f.seek(offset)
            data = f.read()
        complete = data[: data.rfind(b"\n") + 1]
        records = [r for r in (_decode(line) for line in complete.splitlines()) if r]
        return records, offset + len(complete)

    def size(self) -> int:
        return self.path.stat().st_size

    def truncate(self) -> None:
        """Everything written so far was replayed: start the file again."""
        self._file.truncate(0)
        self._file.seek(0)
        self.spooled = 0

    @contextlib.contextmanager
    def orphans(self) -> Iterator[list[tuple[Path, list[Record]]]]:
        """Files of dead workers (unlocked), locked for the caller while it replays them."""
        taken: list[tuple[Path, IO[bytes]]] = []
        for path in sorted(self.folder.glob("*.spool")):
            if path == self.path:
                continue
            handle: IO[bytes] = open(path, "rb")  # noqa: SIM115 - closed below
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()  # a live worker owns it
                continue
            taken.append((path, handle))
        try:
            yield [(p, [r for r in (_decode(x) for x in h.read().splitlines()) if r]) for p, h in taken]
        finally:
            for _, handle in taken:
                handle.close()

    def close(self) -> None:
        self._file.close()
        if self.spooled == 0 and self.size() == 0:
            self.path.unlink(missing_ok=True)
