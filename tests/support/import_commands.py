"""`tally import …` run in the test's process, as a user runs it (its exit code, stdout and stderr), and
what it stored, read back with DuckDB, an independent reader of the Delta tables."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import duckdb
import pytest

from ops.cli import main
from tally.settings import Settings
from tally.storage import find_table
from tally.tables import IMPORTED_DAILY, IMPORTED_RANGES
from tests.support.umami_files import FIRST, LAST


def tally_import(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as done:
        main(["import", *args])
    out = capsys.readouterr()
    return int(done.value.code or 0), out.out, out.err


def umami(
    capsys: pytest.CaptureFixture[str], path: Path, site: str, first: dt.date = FIRST, last: dt.date = LAST
) -> tuple[int, str, str]:
    """``tally import umami PATH --site SITE --from FIRST --to LAST``."""
    return tally_import(capsys, "umami", str(path), "--site", site, "--from", str(first), "--to", str(last))


def stored(settings: Settings, sql: str) -> list[tuple[Any, ...]]:
    """``sql`` over imported.daily and imported.ranges (named so in it) as DuckDB reads them."""
    for name in (IMPORTED_DAILY, IMPORTED_RANGES):
        found = find_table(settings, name)
        alias = name.replace(".", "_")
        if found is not None:
            duckdb.register(alias, found.to_pyarrow_dataset().to_table())
            sql = sql.replace(name, alias)
    if "imported." in sql:  # a table nothing has written yet
        return []
    return duckdb.sql(sql).fetchall()
