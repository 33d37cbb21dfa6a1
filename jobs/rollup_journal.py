"""The roll-ups' journal: the range of 1-minute windows not rolled up yet, kept in a small file beside
the checkpoints so that a crash between a traffic batch and its roll-up cannot lose it (``jobs/rollups.py``)."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any, Protocol

from pyspark.sql import SparkSession


@dataclass(frozen=True)
class Touched:
    """Sites and the first and last 1-minute window a set of batches wrote."""

    sites: frozenset[str]
    first: dt.datetime
    last: dt.datetime

    def union(self, other: Touched | None) -> Touched:
        if other is None:
            return self
        return Touched(self.sites | other.sites, min(self.first, other.first), max(self.last, other.last))


def to_json(touched: Touched | None) -> str:
    if touched is None:
        return "{}"
    sites, first, last = sorted(touched.sites), touched.first.isoformat(), touched.last.isoformat()
    return json.dumps({"sites": sites, "first": first, "last": last})


def from_json(text: str) -> Touched | None:
    found = json.loads(text)
    if not found:
        return None
    first, last = dt.datetime.fromisoformat(found["first"]), dt.datetime.fromisoformat(found["last"])
    return Touched(frozenset(found["sites"]), first, last)


class Journal(Protocol):
    def load(self) -> Touched | None: ...
    def save(self, touched: Touched | None) -> None: ...


class PendingJournal:
    """The range not rolled up yet, in one small JSON file through Hadoop's file system (so the
    same code works beside local checkpoints and on object storage). A save writes a new file and
    renames it over the old one; a crash between the two leaves the new one, which load reads."""

    def __init__(self, spark: SparkSession, uri: str) -> None:
        jvm = spark._jvm  # type: ignore[attr-defined]
        assert jvm is not None, "a JVM-backed Spark session"
        self._path = jvm.org.apache.hadoop.fs.Path(uri)
        self._next = jvm.org.apache.hadoop.fs.Path(uri + ".next")
        self._fs = self._path.getFileSystem(spark._jsc.hadoopConfiguration())  # type: ignore[attr-defined]
        self._io = jvm.org.apache.commons.io.IOUtils

    def _read(self, path: Any) -> str:
        stream = self._fs.open(path)
        try:
            return str(self._io.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def load(self) -> Touched | None:
        for path in (self._next, self._path):  # a leftover .next is the newer one
            if self._fs.exists(path):
                return from_json(self._read(path))
        return None

    def save(self, touched: Touched | None) -> None:
        out = self._fs.create(self._next, True)
        try:
            out.write(to_json(touched).encode())
            out.hsync()
        finally:
            out.close()
        self._fs.delete(self._path, False)
        self._fs.rename(self._next, self._path)
