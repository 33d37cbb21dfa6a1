import subprocess
import sys

import pytest

from ops.cli import build_parser

COMMANDS = ["setup", "up", "down", "status", "traffic", "apikey", "site", "mcp"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str) -> None:
    done = subprocess.run([sys.executable, "-m", "tally", command, "--help"], capture_output=True, text=True)
    assert done.returncode == 0
    assert "usage: tally " + command in done.stdout


def test_the_parser_knows_every_documented_command() -> None:
    help_text = build_parser().format_help()
    assert all(command in help_text for command in COMMANDS)


def test_a_bad_setting_is_reported_without_a_traceback() -> None:
    env = {"TALLY_INGEST__PORT": "eighty", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "tally", "status"], capture_output=True, text=True, env=env)
    assert done.returncode == 2
    assert "TALLY_INGEST__PORT" in done.stderr and "Traceback" not in done.stderr
