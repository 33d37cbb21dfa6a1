"""Service logs rotated by size, as logrotate's ``copytruncate`` does: any process can keep writing.

Every service writes ``<home>/logs/<name>.log`` through the file the supervisor opened for its
output, in append mode, and a JVM or a uvicorn worker cannot be told to reopen it. So a log past
``logs.max_mib`` is copied to ``<name>.log.1`` (older copies move up to ``.2`` … ``.<keep>``, the
oldest dropped) and then emptied in place: each writer's next line lands at the start of the
emptied file, because its writes append. Lines written between the copy and the emptying (a few
milliseconds) are lost; that is the price of not stopping the service. The watchdog (``ops.watch``)
checks the sizes on each pass; under systemd, journald keeps the logs instead.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from tally.log import kv

log = logging.getLogger("ops.logs")


def rotate_if_large(path: Path, *, max_bytes: int, keep: int) -> bool:
    """Rotate ``path`` when it holds more than ``max_bytes``; True if it did."""
    assert max_bytes > 0 and keep > 0, "settings refuse logs.max_mib and logs.keep below 1"
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return False
    if size <= max_bytes:
        return False
    for older in range(keep - 1, 0, -1):
        source = path.with_name(f"{path.name}.{older}")
        if source.exists():
            os.replace(source, path.with_name(f"{path.name}.{older + 1}"))
    with open(path, "rb") as current, open(path.with_name(f"{path.name}.1"), "wb") as copy:
        shutil.copyfileobj(current, copy)
    os.truncate(path, 0)
    log.info("log rotated", extra=kv(log=path.name, bytes=size, kept=keep))
    return True


def rotate_logs(folder: Path, *, max_bytes: int, keep: int) -> list[Path]:
    """Rotate every ``*.log`` of ``folder`` past ``max_bytes``; the ones rotated."""
    return [path for path in sorted(folder.glob("*.log")) if rotate_if_large(path, max_bytes=max_bytes, keep=keep)]
