"""Plausible's CSV export files written as Plausible writes them (ClickHouse's CSVWithNames: quoted
header and text, bare numbers; files ``imported_<table>_<YYYYMMDD>_<YYYYMMDD>.csv``, stored
uncompressed), for the import's tests and the dashboard's."""

from __future__ import annotations

import datetime as dt
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tally.plausible_export import TABLES

FIRST, LAST = dt.date(2024, 3, 1), dt.date(2024, 3, 3)
DAYS = [FIRST + dt.timedelta(days=i) for i in range(3)]


def rows_of(table: str, day: dt.date, n: int) -> dict[str, Any]:
    """One row of ``table`` on ``day``: its dimensions named after the table, its metrics from ``n``."""
    fmt = TABLES[table]
    row: dict[str, Any] = {"date": day.isoformat()}
    for d in fmt.dimensions:
        row[d] = 0 if d == "city" else f"{d}-{n}"
    row.update({m: n * (i + 1) for i, m in enumerate(fmt.metrics)})
    return row


def csv_text(rows: list[dict[str, Any]], header: list[str]) -> str:
    """ClickHouse's CSVWithNames: every name and text cell quoted, numbers bare."""

    def cell(value: Any) -> str:
        return str(value) if isinstance(value, int) else '"' + str(value).replace('"', '""') + '"'

    lines = [",".join(f'"{h}"' for h in header)]
    lines += [",".join(cell(r.get(h, "")) for h in header) for r in rows]
    return "\n".join(lines) + "\n"


def full_export() -> dict[str, str]:
    """File name -> text of a whole export: every table, a row a day (n = day index + 1)."""
    files = {}
    for name, fmt in TABLES.items():
        rows = [rows_of(name, day, i + 1) for i, day in enumerate(DAYS)]
        files[f"imported_{name}_{FIRST:%Y%m%d}_{LAST:%Y%m%d}.csv"] = csv_text(rows, list(fmt.columns))
    return files


def write_zip(path: Path, files: Mapping[str, str | bytes], *, compression: int = zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(path, "w", compression=compression) as archive:
        for name, text in files.items():
            archive.writestr(name, text.encode() if isinstance(text, str) else text)
    return path
