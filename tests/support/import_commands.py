"""`tally import …` run in the test's process, as a user runs it: its exit code, stdout and stderr."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from ops.cli import main
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
