"""The tracker's size budgets and freshness: the files ingest serves are the builds of tracker/t.js
(the core snippet, /t.js) and tracker/vitals.js (the Core Web Vitals extension, /t.vitals.js)."""

import gzip
import shutil
import subprocess
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from ingest.app import SNIPPET, VITALS_SNIPPET, create_app
from tally.settings import PROJECT_ROOT
from tally.vitals import VITALS_TYPE

TRACKER = PROJECT_ROOT / "tracker"
# gzip budgets in bytes, as tracker/report-sizes.js states them
BUDGETS = {SNIPPET.name: 1024, VITALS_SNIPPET.name: 4608}
SERVED = [pytest.param(SNIPPET, id="t.min.js"), pytest.param(VITALS_SNIPPET, id="t.vitals.min.js")]
needs_node_modules = pytest.mark.skipif(
    not (TRACKER / "node_modules").exists(), reason="run `npm ci` in tracker/ (make test does)"
)


def test_the_size_report_states_the_same_budgets() -> None:
    report = (TRACKER / "report-sizes.js").read_text()
    for name, budget in BUDGETS.items():
        assert f"'{name}': {budget}" in report, f"tracker/report-sizes.js no longer gives {name} {budget} B"


@pytest.mark.parametrize("served", SERVED)
def test_the_served_script_is_within_its_gzip_budget(served: Path) -> None:
    size = len(gzip.compress(served.read_bytes(), compresslevel=9))
    budget = BUDGETS[served.name]
    assert size <= budget, f"{served.name} is {size} B gzipped; the budget is {budget} B"


@pytest.mark.skipif(not shutil.which("gzip"), reason="the gzip command is not installed")
@pytest.mark.parametrize("served", SERVED)
def test_the_served_script_is_within_its_budget_by_the_gzip_command_too(served: Path) -> None:
    """`gzip -9` also writes the file's name into its header: the budget holds for that count too."""
    size = len(subprocess.run(["gzip", "-9", "-c", str(served)], capture_output=True, check=True).stdout)
    budget = BUDGETS[served.name]
    assert size <= budget, f"`gzip -9 {served.name}` is {size} B; the budget is {budget} B"


@needs_node_modules
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


@needs_node_modules
def test_the_committed_vitals_build_matches_its_source(tmp_path: Path) -> None:
    node = shutil.which("node")
    assert node, "node is needed to build the extension"
    out = tmp_path / "t.vitals.min.js"
    subprocess.run([node, "build-vitals.js", str(out)], cwd=TRACKER, check=True)
    assert out.read_bytes() == VITALS_SNIPPET.read_bytes(), (
        "ingest/static/t.vitals.min.js is stale: run `npm run build` in tracker/"
    )


def test_the_extension_is_the_web_vitals_build_and_loads_beside_the_core_snippet() -> None:
    """The built extension carries web-vitals' notice and the beacon type the kernel names, and the
    core snippet stays free of it (its budget is full)."""
    built = VITALS_SNIPPET.read_text()
    assert built.startswith("/*! Tally vitals; web-vitals ") and "Apache-2.0" in built.splitlines()[0]
    assert f'k:"{VITALS_TYPE}"' in built
    assert "vitals" not in SNIPPET.read_text()


@pytest.mark.parametrize("route, served", [("/t.js", SNIPPET), ("/t.vitals.js", VITALS_SNIPPET)])
def test_ingest_serves_both_scripts_as_cacheable_javascript_to_any_origin(route: str, served: Path) -> None:
    client = TestClient(create_app())  # no lifespan: serving a script needs no Kafka
    response = client.get(route)
    assert response.status_code == 200 and response.content == served.read_bytes()
    assert response.headers["content-type"].startswith("application/javascript")
    assert response.headers["cache-control"] == "public, max-age=3600"
    assert response.headers["access-control-allow-origin"] == "*"
