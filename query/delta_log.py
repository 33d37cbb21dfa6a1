"""What a Delta table's commits did to its files, read from its log (``_delta_log/<version>.json``).

A prepared scan (:mod:`query.scans`) holds the rows of the files it read. When a commit removes
some of them, the log says whether rows went with them (a forgotten visitor: ``dataChange`` true)
or the same rows were written again into other files (a compaction: every action's ``dataChange``
false), which a scan can follow without reading the range again.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyarrow import fs

from tally.log import kv

log = logging.getLogger("tally.query.delta_log")

Partition = dict[str, str | None]  # a file's partition values, as the log writes them
# At most this many commits are followed (one read of the log each, one after another: a scan kept
# for an hour of archiver commits every 2 s is about 1,800 behind; reading the range is then cheaper
# than as many requests to an object store).
MAX_COMMITS = 300


@dataclass(frozen=True)
class Commit:
    """The files one commit added and removed (path -> partition values), and whether it changed rows."""

    added: dict[str, Partition]
    removed: dict[str, Partition]
    rewrite: bool  # every add and remove says dataChange false: the same rows, in other files


def commits(raw: ds.FileSystemDataset, after: int, until: int) -> list[Commit] | None:
    """The commits after version ``after`` up to ``until`` of the table ``raw`` is a snapshot of;
    None when one of them cannot be read (its log entry cleaned up, or unreadable)."""
    if not 0 <= until - after <= MAX_COMMITS:
        return None
    found = []
    for version in range(after + 1, until + 1):
        try:
            with raw.filesystem.open_input_stream(f"_delta_log/{version:020d}.json") as entry:
                text = entry.read().decode()
            found.append(_commit(text))
        except (OSError, ValueError, KeyError, TypeError):
            log.info("a commit of the table's log could not be read", extra=kv(version=version), exc_info=True)
            return None
    return found


def _commit(text: str) -> Commit:
    added: dict[str, Partition] = {}
    removed: dict[str, Partition] = {}
    rewrite = True
    for line in text.splitlines():
        if not line.strip():
            continue
        action = json.loads(line)
        for kind, files in (("add", added), ("remove", removed)):
            if kind in action:
                file = action[kind]
                files[unquote(file["path"])] = dict(file.get("partitionValues") or {})
                rewrite = rewrite and file.get("dataChange") is False
    return Commit(added, removed, rewrite=rewrite and bool(removed))


def fragment(raw: ds.FileSystemDataset, path: str, partition: Partition) -> ds.Fragment:
    """A fragment of ``raw``'s format for a file the table no longer lists (removed by a compaction,
    still on disk until a vacuum), its partition columns taken from the log's values."""
    expression = pc.scalar(True)
    for name, value in partition.items():
        field = pc.field(name)
        typed = raw.schema.field(name).type
        expression = expression & (field.is_null() if value is None else field == pc.cast(pa.scalar(value), typed))
    return raw.format.make_fragment(path, raw.filesystem, partition_expression=expression)


def exists(raw: ds.FileSystemDataset, path: str) -> bool:
    """Whether the file is still on the table's storage (a vacuum deletes removed files)."""
    return bool(raw.filesystem.get_file_info(path).type == fs.FileType.File)  # mypy: Any from pyarrow
