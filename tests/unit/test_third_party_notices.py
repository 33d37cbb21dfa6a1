"""Tally is Apache-2.0, and every third-party file it ships is named, with its licence, in THIRD-PARTY-NOTICES.md."""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
NOTICES = ROOT / "THIRD-PARTY-NOTICES.md"
DATA, STATIC = ROOT / "ingest" / "data", ROOT / "ingest" / "static"
TALLYS_OWN = {DATA / "README.md", DATA / "tally-referrers.yml"}
# sha256 of https://www.apache.org/licenses/LICENSE-2.0.txt, the text every Apache-2.0 project copies.
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"

SHIPPED = sorted(p for p in [*DATA.iterdir(), *STATIC.iterdir()] if p.is_file() and p not in TALLYS_OWN)


def test_the_licence_is_the_apache_2_0_text() -> None:
    text = (ROOT / "LICENSE").read_bytes()
    assert hashlib.sha256(text).hexdigest() == APACHE_2_0_SHA256, "LICENSE must be the Apache License 2.0, unchanged"
    assert text.split(b"\n")[1].strip() == b"Apache License"


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_vendored_file_and_bundled_build_is_named_in_the_notices(path: Path) -> None:
    """A new file in ingest/data/ or ingest/static/ needs its line: what it is, where from, its licence."""
    assert f"`{path.relative_to(ROOT)}`" in NOTICES.read_text(encoding="utf-8"), f"name {path.name} in {NOTICES.name}"


def test_tallys_own_referrer_list_is_named_as_tallys() -> None:
    rows = NOTICES.read_text(encoding="utf-8").splitlines()
    line = next(row for row in rows if "`ingest/data/tally-referrers.yml`" in row)
    assert "Tally's own" in line and "Apache-2.0" in line


def package(name: str) -> str:
    """A package's name as PyPI compares them: ``great_expectations`` is ``great-expectations``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_run_time_dependency_is_named_in_the_notices() -> None:
    """A new dependency in pyproject.toml needs its row: name, version, licence (from its metadata)."""
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    rows = [row.split("|") for row in NOTICES.read_text(encoding="utf-8").splitlines() if row.startswith("| ")]
    missing = {package(Requirement(d).name) for d in dependencies} - {package(row[1].strip()) for row in rows}
    assert not missing, f"add {sorted(missing)} to {NOTICES.name}"


def test_the_notices_name_the_web_vitals_version_the_build_bundles() -> None:
    pinned = json.loads((ROOT / "tracker" / "package.json").read_text())["devDependencies"]["web-vitals"]
    banner = (STATIC / "t.vitals.min.js").read_text(encoding="utf-8").splitlines()[0]
    assert f"web-vitals {pinned} (c) Google LLC, Apache-2.0" in banner
    assert f"web-vitals) {pinned}" in NOTICES.read_text(encoding="utf-8")
