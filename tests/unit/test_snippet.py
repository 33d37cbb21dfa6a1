"""The tracker's size budget and freshness: the file ingest serves is the build of tracker/t.js."""

import gzip
import shutil
import subprocess
from pathlib import Path

import pytest

from ingest.app import SNIPPET
from tally.settings import PROJECT_ROOT

TRACKER = PROJECT_ROOT / "tracker"


def test_the_served_snippet_is_at_most_1_kb_gzipped() -> None:
    size = len(gzip.compress(SNIPPET.read_bytes(), compresslevel=9))
    assert size <= 1024, f"t.min.js is {size} B gzipped; the budget is 1024 B"


@pytest.mark.skipif(not shutil.which("gzip"), reason="the gzip command is not installed")
def test_the_served_snippet_is_at_most_1_kb_by_the_gzip_command_too() -> None:
    """`gzip -9` also writes the file's name into its header: the budget holds for that count too."""
    size = len(subprocess.run(["gzip", "-9", "-c", str(SNIPPET)], capture_output=True, check=True).stdout)
    assert size <= 1024, f"`gzip -9 t.min.js` is {size} B; the budget is 1024 B"


@pytest.mark.skipif(not (TRACKER / "node_modules").exists(), reason="run `npm ci` in tracker/ (make test does)")
def test_the_committed_build_matches_the_source(tmp_path: Path) -> None:
    terser = TRACKER / "node_modules" / ".bin" / "terser"
    out = tmp_path / "t.min.js"
    subprocess.run(
        [str(terser), "t.js", "--compress", "passes=3", "--mangle", "--toplevel", "--output", str(out)],
        cwd=TRACKER,
        check=True,
    )
    assert out.read_bytes() == SNIPPET.read_bytes(), "ingest/static/t.min.js is stale: run `npm run build` in tracker/"
    assert shutil.which("node")
