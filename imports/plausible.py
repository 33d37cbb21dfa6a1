"""Plausible's export ZIP read whole and checked, before anything is stored: every one of its ten
files present once, each named as Plausible names them, each read by :mod:`imports.plausible_csv`."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from imports.archive import DEFAULT_LIMITS, Limits, entries, file_digest
from imports.plausible_csv import read_rows
from tally.plausible_export import TABLES, FormatError, file_name


@dataclass(frozen=True)
class Export:
    """An export's rows by table (``visitors``, ``pages``, …), the range its names give, its digest."""

    file_name: str
    digest: str
    first: dt.date
    last: dt.date
    tables: dict[str, pa.Table]

    @property
    def rows(self) -> int:
        return sum(t.num_rows for t in self.tables.values())


def read_export(
    path: Path, limits: Limits = DEFAULT_LIMITS, progress: Callable[[str, int], None] = lambda name, rows: None
) -> Export:
    """Every file of Plausible's export at ``path``, checked; ``progress(file, rows)`` after each file."""
    tables: dict[str, pa.Table] = {}
    firsts, lasts = [], []
    for entry in entries(path, limits):
        named = file_name(entry.name)
        if named.table.name in tables:
            raise FormatError(f"{path.name}: {entry.name}", f"a second file of imported_{named.table.name}")
        tables[named.table.name] = read_rows(entry.name, entry.data, named)
        firsts.append(named.first)
        lasts.append(named.last)
        progress(entry.name, tables[named.table.name].num_rows)
    missing = [f"imported_{name}" for name in TABLES if name not in tables]
    if missing:
        raise FormatError(
            path.name,
            f"no file of {', '.join(missing)}; Plausible's export holds all ten tables: import the ZIP it gave",
        )
    return Export(path.name, file_digest(path), min(firsts), max(lasts), tables)
