"""The layer contracts of pyproject.toml hold on the real tree, and fail when a layer is crossed.

The crossing is tried on a copy of the house's skeleton (every top-level package, empty but for the
imports under test) checked against the very contracts in pyproject.toml, so the real tree is never
touched while other tests run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
PACKAGES = (
    "tally",
    "query",
    "topics",
    "ops",
    "ingest",
    "archiver",
    "jobs",
    "quality",
    "dashboard",
    "api",
    "simulator",
    "notify",
    "imports",
    "bench",
    "tests",
)


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def skeleton(tmp_path: Path, modules: dict[str, str]) -> Path:
    """Every top-level package, the entry points the contracts allow, and ``modules`` (path -> source)."""
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    files = {
        "ops/cli.py": "import dashboard\nimport archiver\nimport tally\n",
        "tally/__main__.py": "from ops.cli import main\n",
        "simulator/__main__.py": "from ops.cli import main\n",
        **modules,
    }
    for path, source in files.items():
        (tmp_path / path).write_text(source)
    return tmp_path


def test_the_real_tree_keeps_every_layer_contract() -> None:
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


def test_a_skeleton_that_follows_the_layers_passes(tmp_path: Path) -> None:
    modules = {"dashboard/page.py": "import tally\nimport topics\n", "ingest/sites.py": "import topics\n"}
    done = lint_imports(skeleton(tmp_path, modules))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("module", "source", "refusal"),
    [
        ("dashboard/health.py", "import archiver\n", "dashboard is not allowed to import archiver"),
        ("quality/audit.py", "import jobs\n", "quality is not allowed to import jobs"),
        ("ingest/app.py", "import ops\n", "ingest is not allowed to import ops"),
        ("tally/settings.py", "import dashboard\n", "tally is not allowed to import dashboard"),
        ("bench/views.py", "import tests\n", "bench is not allowed to import tests"),
        ("tally/sketches.py", "import pyspark\n", "tally is not allowed to import pyspark"),
        ("query/engine.py", "import dashboard\n", "query is not allowed to import dashboard"),
        ("api/app.py", "import dashboard\n", "api is not allowed to import dashboard"),
        ("notify/digest.py", "import dashboard\n", "notify is not allowed to import dashboard"),
        ("query/raw.py", "import pyspark\n", "query is not allowed to import pyspark"),
        ("topics/follower.py", "import ingest\n", "topics is not allowed to import ingest"),
        ("topics/follower.py", "import query\n", "topics is not allowed to import query"),
    ],
)
def test_an_import_across_the_layers_fails_the_lint(tmp_path: Path, module: str, source: str, refusal: str) -> None:
    done = lint_imports(skeleton(tmp_path, {module: source}))
    assert done.returncode != 0
    assert refusal in done.stdout, done.stdout + done.stderr
