"""One file of Plausible's export read into Arrow rows, each cell checked.

Columns are matched by their header names, in any order, as Plausible's importer does; a metric a
file lacks is 0, and so is an empty metric cell (ClickHouse's default). A file is refused whole,
naming the file, line and column, when its header lacks ``date`` or one of its table's dimensions,
names a column no version of the format has, or repeats one; when a cell is not a whole number
(or a date), a count is negative, a row's date lies outside the range in the file's name, or the
bytes are not UTF-8. Arrow parses the file; only a file Arrow refuses is read again, line by line,
to say where.
"""

from __future__ import annotations

import csv
import datetime as dt
import io

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from imports.csv_cells import BOM, MAX_VALUE_CHARS, utf8_text, whole_number_problem
from tally.plausible_export import FileName, FormatError, TableFormat, column_type


def read_rows(name: str, data: bytes, where: FileName) -> pa.Table:
    """The rows of one export file (``name``, its bytes ``data``): every column of its table's
    format, in the format's order, defaults filled in."""
    fmt = where.table
    data = data.removeprefix(BOM)
    header = _header(name, data, fmt)
    wanted = [c for c in header if c in fmt.columns]
    try:
        table = pcsv.read_csv(
            io.BytesIO(data),
            parse_options=pcsv.ParseOptions(newlines_in_values=False),
            convert_options=pcsv.ConvertOptions(
                column_types={c: column_type(c) for c in wanted},
                include_columns=wanted,
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise _located(name, data, header, fmt) or FormatError(name, f"cannot be read as CSV ({e})") from None
    _check_values(name, table, where)
    columns = {c: _filled(table, c) for c in fmt.columns}
    return pa.table(columns)


def _header(name: str, data: bytes, fmt: TableFormat) -> list[str]:
    first = data.split(b"\n", 1)[0].rstrip(b"\r")
    try:
        header = next(csv.reader([first.decode("utf-8")]), [])
    except (UnicodeDecodeError, csv.Error) as e:
        raise FormatError(f"{name}, line 1", f"the header cannot be read ({e})") from None
    where = f"{name}, line 1"
    if not header or header == [""]:
        raise FormatError(where, f"no header; the first line names the columns: {','.join(fmt.columns)}")
    for column in header:
        if header.count(column) > 1:
            raise FormatError(where, f"the column {column!r} is named twice")
        if column not in fmt.columns and column not in fmt.legacy:
            raise FormatError(
                where, f"{column!r} is not a column of imported_{fmt.name}; its columns are {', '.join(fmt.columns)}"
            )
    missing = [c for c in ("date", *fmt.dimensions) if c not in header]
    if missing:
        raise FormatError(
            where,
            f"no {', '.join(missing)} column; imported_{fmt.name} rows need date and their "
            f"dimensions ({', '.join(fmt.dimensions) or 'none'})",
        )
    return header


def _located(name: str, data: bytes, header: list[str], fmt: TableFormat) -> FormatError | None:
    """The first line and column Arrow could not read, found by reading the file line by line."""
    try:
        text = utf8_text(name, data)
    except FormatError as e:
        return e
    rows = csv.reader(io.StringIO(text, newline=""))
    next(rows, None)
    for number, row in enumerate(rows, start=2):
        if len(row) != len(header):
            return FormatError(f"{name}, line {number}", f"{len(row)} cells where the header names {len(header)}")
        for column, cell in zip(header, row, strict=True):
            if column not in fmt.columns:
                continue
            problem = _cell_problem(column, cell)
            if problem:
                return FormatError(f"{name}, line {number}, column {column!r}", problem)
    return None


def _cell_problem(column: str, cell: str) -> str:
    kind = column_type(column)
    if kind == pa.date32():
        try:
            dt.date.fromisoformat(cell)
        except ValueError:
            return f"{cell[:40]!r} is not a date (YYYY-MM-DD)"
    elif kind == pa.int64() and cell != "":
        return whole_number_problem(cell)
    return ""


def _check_values(name: str, table: pa.Table, where: FileName) -> None:
    for column in table.column_names:
        values = table.column(column)
        if column_type(column) == pa.int64():
            negative = pc.less(values, 0)
            if pc.any(negative).as_py():
                at = _first(negative)
                raise FormatError(
                    f"{name}, line {at + 2}, column {column!r}",
                    f"{values[at].as_py()} is negative; every count and sum is 0 or more",
                )
        elif column_type(column) == pa.string():
            long = pc.greater(pc.utf8_length(values), MAX_VALUE_CHARS)
            if pc.any(long).as_py():
                raise FormatError(
                    f"{name}, line {_first(long) + 2}, column {column!r}", f"longer than {MAX_VALUE_CHARS} characters"
                )
    dates = table.column("date")
    if dates.null_count:
        at = _first(pc.is_null(dates))
        raise FormatError(f"{name}, line {at + 2}, column 'date'", "empty; every row has its day (YYYY-MM-DD)")
    outside = pc.or_(pc.less(dates, pa.scalar(where.first)), pc.greater(dates, pa.scalar(where.last)))
    if pc.any(outside).as_py():
        at = _first(outside)
        raise FormatError(
            f"{name}, line {at + 2}, column 'date'",
            f"{dates[at].as_py()} is outside the range the file's name gives ({where.first} to {where.last})",
        )


def _first(mask: pa.ChunkedArray) -> int:
    return int(pc.index(mask, True).as_py())


def _filled(table: pa.Table, column: str) -> pa.Array | pa.ChunkedArray:
    """A column of the file, or the format's default where the file lacks it: 0, or "" for text."""
    kind = column_type(column)
    default: object = "" if kind == pa.string() else 0
    if column not in table.column_names:
        return pa.array([default] * table.num_rows, kind)
    return pc.fill_null(table.column(column), pa.scalar(default, kind))
