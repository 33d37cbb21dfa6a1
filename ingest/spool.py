"""A local, fsync'd, append-only spool for events Kafka could not take right now.

Ingest answers 202 only when an event is safe: acknowledged by Kafka, or written here. The
replayer sends spooled records to Kafka in order when the broker is back, then truncates.
Each worker owns one file (mode 0600) and holds an exclusive lock on it; a file whose owner died
is unlocked, and any worker adopts and replays it. Replays may duplicate an event that Kafka
had in fact stored; ``event_id`` deduplication downstream makes that harmless.

A write that fails half way (disk full) is cut back to the last complete record and raises
:class:`SpoolWriteFailed`, so the request is refused and the next record never merges with a
torn one. A complete line that does not decode is logged and kept aside in
``<file>.undecodable``, never dropped without a word.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import logging
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from tally.log import kv

log = logging.getLogger("tally.ingest.spool")

Record = tuple[str, bytes | None, bytes]  # topic, key, value
Writer = Callable[[int, bytes | memoryview], int]  # os.write's shape: (fd, data) -> bytes written


class SpoolWriteFailed(RuntimeError):
    """The spool could not make records durable (disk full, I/O error); nothing of them was kept."""


def _encode(record: Record) -> bytes:
    topic, key, value = record
    line = {"t": topic, "k": key.decode() if key else None, "v": base64.b64encode(value).decode()}
    return json.dumps(line, separators=(",", ":")).encode() + b"\n"


def _decode(line: bytes) -> Record | None:
    try:
        data = json.loads(line)
        return data["t"], data["k"].encode() if data["k"] else None, base64.b64decode(data["v"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _fsync_folder(folder: Path) -> None:
    """Make a file's creation (its directory entry) durable, not only its contents."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Spool:
    """This worker's spool file, plus adoption of files left by workers that died."""

    def __init__(self, folder: Path, *, writer: Writer = os.write) -> None:
        """``writer``: how bytes reach the file (``os.write``; tests inject one that fails half way)."""
        self.folder = folder
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        name = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.path = folder / f"{name}.spool"
        # Locked under a name no replayer looks at, then renamed: another worker never sees the file
        # unlocked, so it cannot adopt (and unlink) a live worker's file. Unbuffered: after a failed
        # write no stale bytes wait in a buffer to be flushed later.
        creating = folder / f".{name}.creating"
        self._fd = os.open(creating, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.rename(creating, self.path)
        _fsync_folder(folder)
        self._write = writer
        self._end = 0  # bytes of complete, fsync'd records in our file
        self.spooled = 0  # records in our file not yet replayed

    def append(self, records: list[Record]) -> None:
        """Write records durably (fsync) before the request is acknowledged.

        Raises :class:`SpoolWriteFailed` when they could not be, after cutting the file back to
        its last complete record: the caller must refuse the request (nothing of it is stored).
        """
        data = memoryview(b"".join(_encode(r) for r in records))
        try:
            if os.fstat(self._fd).st_size != self._end:  # an earlier cut-back failed: try it again first
                self._cut_back()
            while data:
                written = self._write(self._fd, data)
                data = data[written:]
            os.fsync(self._fd)
        except OSError as e:
            cut = self._try_cut_back()
            raise SpoolWriteFailed(
                f"could not write {len(records)} records to the spool {self.path} ({e.strerror or e}); "
                f"{'cut back to' if cut else 'could not yet cut back to'} its last complete record at byte "
                f"{self._end}. Free space on {self.folder} (or fix the disk): ingest refuses events with 503 "
                "meanwhile"
            ) from e
        self._end = os.fstat(self._fd).st_size
        self.spooled += len(records)

    def _cut_back(self) -> None:
        os.ftruncate(self._fd, self._end)
        os.fsync(self._fd)

    def _try_cut_back(self) -> bool:
        """Cut a torn write off; on failure, the next append tries again before writing."""
        try:
            self._cut_back()
        except OSError as e:
            log.error("spool: torn record not cut back yet", extra=kv(file=str(self.path), error=str(e)))
            return False
        return True

    def read_own(self, offset: int) -> tuple[list[Record], int]:
        """Records of our own file from byte ``offset``, and the offset after them."""
        with open(self.path, "rb") as f:
            f.seek(offset)
            data = f.read(self._end - offset) if self._end >= offset else b""
        complete = data[: data.rfind(b"\n") + 1]
        return self._decode_lines(self.path, complete, offset), offset + len(complete)

    def _decode_lines(self, path: Path, complete: bytes, offset: int) -> list[Record]:
        """Decode complete lines; an undecodable one is logged and kept in ``<file>.undecodable``."""
        records: list[Record] = []
        at = offset
        for line in complete.splitlines(keepends=True):
            record = _decode(line)
            if record is not None:
                records.append(record)
            elif line.strip():
                self._keep_undecodable(path, line, at)
            at += len(line)
        return records

    def _keep_undecodable(self, path: Path, line: bytes, at: int) -> None:
        aside = path.with_name(path.name + ".undecodable")
        log.error(
            "spool: undecodable line kept aside, not replayed",
            extra=kv(file=str(path), byte=at, length=len(line), kept_in=str(aside)),
        )
        try:
            fd = os.open(aside, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, line)
            finally:
                os.close(fd)
        except OSError as e:
            log.error("spool: undecodable line could not be kept aside", extra=kv(file=str(aside), error=str(e)))

    def size(self) -> int:
        return self._end

    def truncate(self) -> None:
        """Everything written so far was replayed: start the file again."""
        os.ftruncate(self._fd, 0)
        self._end = 0
        self.spooled = 0

    def pending_bytes(self) -> int:
        """Bytes waiting for Kafka in our file and in dead workers' files not being replayed (unlocked);
        a live worker's file is its own to report."""
        total = self._end
        for path in self.folder.glob("*.spool"):
            if path == self.path:
                continue
            try:
                with open(path, "rb") as handle:
                    fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    total += os.fstat(handle.fileno()).st_size
            except (BlockingIOError, FileNotFoundError):  # locked by its owner or a replayer, or gone
                continue
        return total

    def has_orphans(self) -> bool:
        """Whether another worker's file is in the folder (a live worker's is skipped when adopting)."""
        return any(p != self.path for p in self.folder.glob("*.spool"))

    @contextlib.contextmanager
    def orphans(self) -> Iterator[list[tuple[Path, list[Record]]]]:
        """Files of dead workers (unlocked), locked for the caller while it replays them."""
        taken: list[tuple[Path, IO[bytes]]] = []
        for path in sorted(self.folder.glob("*.spool")):
            if path == self.path:
                continue
            try:
                handle: IO[bytes] = open(path, "rb")  # noqa: SIM115 - closed below
            except FileNotFoundError:  # another worker adopted and replayed it since the glob
                continue
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()  # a live worker owns it
                continue
            taken.append((path, handle))
        try:
            yield [(p, self._read_orphan(p, h.read())) for p, h in taken]
        finally:
            for _, handle in taken:
                handle.close()

    def _read_orphan(self, path: Path, data: bytes) -> list[Record]:
        complete = data[: data.rfind(b"\n") + 1]
        if len(complete) < len(data):  # its worker died mid-write: that request was never acknowledged
            log.warning("spool: torn last record of a dead worker dropped", extra=kv(file=str(path)))
        return self._decode_lines(path, complete, 0)

    def close(self) -> None:
        empty = self.spooled == 0 and self._end == 0
        os.close(self._fd)
        if empty:
            self.path.unlink(missing_ok=True)
