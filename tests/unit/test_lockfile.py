"""requirements.lock (what uv installs) and constraints.txt (what pip installs) pin the same versions.

constraints.txt is the source of truth; `bash scripts/setup-python.sh --lock` regenerates the lock from
it and pyproject.toml. A test here failing means one was changed without the other.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / "constraints.txt"
LOCK = ROOT / "requirements.lock"
PYPROJECT = ROOT / "pyproject.toml"
REGENERATE = "run `bash scripts/setup-python.sh --lock` and commit requirements.lock"

# Pinned in constraints.txt, but required only on other platforms, so absent from the Linux lock.
NOT_ON_LINUX = {"tzdata": "pandas needs it on Windows only"}

PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")


def normalized(name: str) -> str:
    """A distribution name as the index compares it (PEP 503): `Flask`, `ruamel.yaml`, `delta_spark` alike."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(lines: list[str]) -> dict[str, str]:
    """Each `name==version` at the start of a line, by normalized name; comments and hashes are skipped."""
    found: dict[str, str] = {}
    for line in lines:
        match = PIN.match(line)
        if match:
            name = normalized(match.group(1))
            assert name not in found, f"{name} is pinned twice"
            found[name] = match.group(2)
    return found


def constraint_pins() -> dict[str, str]:
    """What pip is held to."""
    return pins(CONSTRAINTS.read_text().splitlines())


def lock_pins() -> dict[str, str]:
    """What uv installs."""
    return pins(LOCK.read_text().splitlines())


def pyproject_pins() -> dict[str, str]:
    """The project's own pins, its `dev` extra included."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    requirements = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    return pins(requirements)


def test_every_locked_package_has_the_version_constraints_txt_pins() -> None:
    constraints = constraint_pins()
    differing = {
        name: (version, constraints.get(name, "not pinned"))
        for name, version in lock_pins().items()
        if constraints.get(name) != version
    }
    assert not differing, f"lock version vs constraints.txt: {differing}; {REGENERATE}"


def test_every_package_constraints_txt_pins_is_locked_unless_linux_does_not_need_it() -> None:
    unlocked = set(constraint_pins()) - set(lock_pins())
    missing = unlocked - set(NOT_ON_LINUX)
    assert not missing, f"pinned in constraints.txt but not in requirements.lock: {sorted(missing)}; {REGENERATE}"
    stale = set(NOT_ON_LINUX) - unlocked
    assert not stale, f"NOT_ON_LINUX names packages that are locked or not pinned at all: {sorted(stale)}"


def test_every_pin_in_pyproject_is_the_locked_version() -> None:
    locked = lock_pins()
    differing = {
        name: (version, locked.get(name, "not locked"))
        for name, version in pyproject_pins().items()
        if locked.get(name) != version
    }
    assert not differing, f"pyproject.toml version vs requirements.lock: {differing}; {REGENERATE}"


def test_the_lock_installs_the_project_itself_editable_and_every_package_with_its_hashes() -> None:
    text = LOCK.read_text()
    assert re.search(r"^-e \.$", text, re.MULTILINE), f"requirements.lock does not install `-e .`; {REGENERATE}"
    entries = re.split(r"^(?=[A-Za-z0-9])", text, flags=re.MULTILINE)
    unhashed = [entry.split("==")[0] for entry in entries if PIN.match(entry) and "--hash=sha256:" not in entry]
    assert not unhashed, f"locked without a hash: {unhashed}; {REGENERATE}"


def test_the_lock_names_no_index_and_no_url() -> None:
    # The lock travels with the repository; where packages come from is the installer's setting.
    assert "://" not in LOCK.read_text(), "requirements.lock names an index or a URL; write it without --emit-index-url"
