"""Umami's website export read whole and checked, before anything is stored: the ZIP itself, or the
export route's answer ``{"zip": "<base64>"}`` saved to a file (which one is told from its bytes).

Every one of the seven files (:data:`tally.umami_export.FILES`) must be there once, each ``x,y``
with a whole number of 0 or more in ``y`` (or empty: a file of no rows is 0 bytes); a refusal names
the file, line and column. The files hold no dates: the range the export was asked for is the
command's (``--from``/``--to``), and the store keeps it with the rows (:mod:`imports.store`).

A file of Umami's top 500 rows or more is taken as it is: Umami cuts each file at its top 500 values
by ``y`` (a later version may cut elsewhere), so the command notes that the values past them are not
in the export; more rows than that are as good as the first 500.
"""

from __future__ import annotations

import base64
import binascii
import csv
import hashlib
import io
import json
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from imports.archive import Limits, entries, file_digest
from imports.csv_cells import BOM, MAX_VALUE_CHARS, utf8_text, whole_number_problem
from tally.plausible_export import FormatError
from tally.umami_export import FILES, HEADER

# Umami's export is seven files of at most 500 rows, each value at most 500 characters (url_path and
# referrer_domain are varchar(500)): about 2 MB. These limits leave room for far more, and keep the
# answer's JSON, read whole to be decoded, small enough to hold in memory.
UMAMI_LIMITS = Limits(max_files=32, max_file_bytes=64 << 20, max_total_bytes=256 << 20, max_ratio=100)
_ZIP_OVERHEAD = 1024  # a ZIP's headers and directory entry of one file beside its bytes, at most (short names)


@dataclass(frozen=True)
class UmamiExport:
    """An export's rows by file (``pages``, …; columns ``value`` and ``figure``), and its ZIP's SHA-256."""

    file_name: str
    digest: str  # of the ZIP (decoded from the answer): the ZIP and the answer it came in are one export
    tables: dict[str, pa.Table]

    @property
    def rows(self) -> int:
        return sum(t.num_rows for t in self.tables.values())


def read_umami(
    path: Path, limits: Limits = UMAMI_LIMITS, progress: Callable[[str, int], None] = lambda name, rows: None
) -> UmamiExport:
    """Every file of Umami's export at ``path`` (a ZIP, or the route's JSON answer), checked;
    ``progress(file, rows)`` after each file."""
    content = None if zipfile.is_zipfile(path) else _zip_of_answer(path, limits)
    digest = hashlib.sha256(content).hexdigest() if content is not None else file_digest(path)  # a ZIP in chunks
    tables: dict[str, pa.Table] = {}
    for entry in entries(path, limits, content=content):
        where = f"{path.name}: {entry.name}"
        stem = entry.name.removesuffix(".csv")
        if stem not in FILES or not entry.name.endswith(".csv"):
            known = ", ".join(f"{name}.csv" for name in FILES)
            raise FormatError(where, f"not a file of Umami's export (its files are {known})")
        if stem in tables:
            raise FormatError(where, f"a second {entry.name}")
        tables[stem] = read_file(entry.name, entry.data)
        progress(entry.name, tables[stem].num_rows)
    missing = [f"{name}.csv" for name in FILES if name not in tables]
    if missing:
        raise FormatError(
            path.name, f"no {', '.join(missing)}; Umami's export holds all seven files: import the ZIP it gave, whole"
        )
    return UmamiExport(path.name, digest, {name: tables[name] for name in FILES})


def read_file(name: str, data: bytes) -> pa.Table:
    """The rows of one file of the export (``name``, its bytes ``data``): ``value`` (x), ``figure`` (y)."""
    data = data.removeprefix(BOM)
    values: list[str] = []
    figures: list[int] = []
    if data:  # Umami writes a file of no rows as 0 bytes, without its header
        reader = csv.reader(io.StringIO(utf8_text(name, data), newline=""), strict=True)
        try:
            _check_header(name, next(reader, []))
            read = reader.line_num
            for row in reader:
                where, read = f"{name}, line {read + 1}", reader.line_num
                if row:  # a blank line (an editor's newline at the end) holds nothing
                    value, figure = _cells(where, row)
                    values.append(value)
                    figures.append(figure)
        except csv.Error as e:
            raise FormatError(f"{name}, line {reader.line_num}", f"cannot be read as CSV ({e})") from None
    return pa.table({"value": pa.array(values, pa.string()), "figure": pa.array(figures, pa.int64())})


def _check_header(name: str, header: list[str]) -> None:
    if tuple(header) != HEADER:
        shown = ",".join(header)[:80]
        raise FormatError(f"{name}, line 1", f"the header is {shown!r}; each file of Umami's export begins x,y")


def _cells(where: str, row: list[str]) -> tuple[str, int]:
    if len(row) != len(HEADER):
        raise FormatError(where, f"{len(row)} cells where the header names 2 (x,y)")
    value, figure = row
    if len(value) > MAX_VALUE_CHARS:
        raise FormatError(f"{where}, column 'x'", f"longer than {MAX_VALUE_CHARS:,} characters")
    problem = whole_number_problem(figure) if figure else "empty; every value has its count"
    if problem:
        raise FormatError(f"{where}, column 'y'", problem)
    if int(figure) < 0:
        raise FormatError(f"{where}, column 'y'", f"{figure} is negative; every count is 0 or more")
    return value, int(figure)


def _zip_of_answer(path: Path, limits: Limits) -> bytes:
    """The ZIP in the export route's answer ``{"zip": "<base64>"}``, read with ``limits``."""
    # base64 writes 4 characters for 3 bytes
    largest = (limits.max_total_bytes + limits.max_files * _ZIP_OVERHEAD) * 4 // 3 + _ZIP_OVERHEAD
    size = path.stat().st_size
    if size > largest:
        raise FormatError(
            path.name, f"{size:,} bytes, over the limit of {largest:,} for Umami's answer: refused unread"
        )
    data = path.read_bytes().removeprefix(BOM)
    if not data.lstrip().startswith(b"{"):
        raise FormatError(
            path.name,
            'neither a ZIP archive nor the export\'s answer ({"zip": "<base64>"}); give the .zip, or the answer'
            " saved whole",
        )
    try:
        body = json.loads(utf8_text(path.name, data))
    except json.JSONDecodeError as e:
        raise FormatError(f"{path.name}, line {e.lineno}, column {e.colno}", f"not JSON ({e.msg})") from None
    except RecursionError:
        raise FormatError(path.name, "not the export's answer: JSON nested too deeply to read") from None
    if not isinstance(body, dict) or "zip" not in body:
        error = body.get("error") if isinstance(body, dict) else None
        message = error.get("message", error) if isinstance(error, dict) else error
        said = f"; Umami answered an error ({str(message)[:200]})" if error else ""
        raise FormatError(path.name, f'no "zip" in the answer{said}: the export answers {{"zip": "<base64>"}}')
    if not isinstance(body["zip"], str):
        raise FormatError(f'{path.name}: "zip"', "not text; the export answers the ZIP as base64 text")
    try:
        content = base64.b64decode(body["zip"], validate=True)
    except (binascii.Error, ValueError) as e:
        raise FormatError(f'{path.name}: "zip"', f"not base64 ({e}); save the answer whole, unchanged") from None
    if not zipfile.is_zipfile(io.BytesIO(content)):
        raise FormatError(f'{path.name}: "zip"', "the base64 does not hold a ZIP archive; save the answer unchanged")
    return content
