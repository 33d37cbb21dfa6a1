import subprocess
import sys

import pytest

from ops.cli import build_parser

COMMANDS = ["setup", "up", "down", "status", "traffic", "apikey", "site", "mcp", "import", "export", "changes"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str) -> None:
    done = subprocess.run([sys.executable, "-m", "tally", command, "--help"], capture_output=True, text=True)
    assert done.returncode == 0
    assert "usage: tally " + command in done.stdout


def test_the_command_line_loads_no_query_engine_or_http_client_until_a_command_needs_one() -> None:
    """`tally --help`, `tally site list` and the like start in well under a second: importing the
    CLI leaves pandas, DuckDB, PySpark and httpx unloaded (pandas alone took 2.4 s of 3.9)."""
    heavy = ("pandas", "duckdb", "pyspark", "httpx", "pyarrow")
    script = f"import sys, ops.cli; print([m for m in {heavy!r} if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_parser_knows_every_documented_command() -> None:
    help_text = build_parser().format_help()
    assert all(command in help_text for command in COMMANDS)


def test_a_bad_setting_is_reported_without_a_traceback() -> None:
    env = {"TALLY_INGEST__PORT": "eighty", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "tally", "status"], capture_output=True, text=True, env=env)
    assert done.returncode == 2
    assert "TALLY_INGEST__PORT" in done.stderr and "Traceback" not in done.stderr
