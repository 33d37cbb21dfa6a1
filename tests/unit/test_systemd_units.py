"""`tally systemd` writes one unit per service, restarting always, ordered after the broker."""

from __future__ import annotations

import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ops.systemd import exec_line, unit_files, write_units
from tally.settings import Settings


@pytest.fixture(autouse=True)
def unit_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """A port and a secret the units must carry (`settings` reads them)."""
    monkeypatch.setenv("TALLY_INGEST__PORT", "8123")
    monkeypatch.setenv("TALLY_WAREHOUSE__SECRET_ACCESS_KEY", "s3cr3t value")


def sections(text: str) -> dict[str, list[tuple[str, str]]]:
    """A unit file as {section: [(key, value), …]} (keys repeat: Environment=)."""
    found: dict[str, list[tuple[str, str]]] = {}
    current = ""
    for line in text.splitlines():
        if line.startswith("["):
            current = line.strip("[]")
            found[current] = []
        elif "=" in line:
            key, value = line.split("=", 1)
            found[current].append((key, value))
    return found


def values(text: str, section: str, key: str) -> list[str]:
    return [v for k, v in sections(text)[section] if k == key]


def test_there_is_one_unit_per_service_and_a_target_but_none_for_synthetic_traffic(settings: Settings) -> None:
    names = [u.name for u in unit_files(settings, user="tally")]
    assert names == [
        "tally-broker.service",
        "tally-ingest.service",
        "tally-archiver.service",
        "tally-views.service",
        "tally-dashboard.service",
        "tally-api.service",
        "tally.target",
    ]


def test_every_service_restarts_always_within_a_start_limit_and_runs_what_tally_up_runs(settings: Settings) -> None:
    units = {u.name: u.text for u in unit_files(settings, user="tally")}
    for name in ("ingest", "archiver", "views"):
        text = units[f"tally-{name}.service"]
        assert values(text, "Service", "Restart") == ["always"]
        assert values(text, "Service", "RestartSec") == ["5"]
        assert values(text, "Unit", "StartLimitIntervalSec") == ["300"]
        assert values(text, "Unit", "StartLimitBurst") == ["5"]
        assert values(text, "Service", "User") == ["tally"]
        module = {"ingest": "ingest", "archiver": "archiver", "views": "jobs"}[name]
        assert values(text, "Service", "ExecStart") == [f"{sys.executable} -m {module}"]
        assert f"TALLY_HOME={settings.home_dir}" in values(text, "Service", "Environment")
        assert values(text, "Install", "WantedBy") == ["tally.target"]
        # the batch services yield the cores to ingest, as under `tally up`
        assert values(text, "Service", "Nice") == ([] if name == "ingest" else ["10"])
        assert values(text, "Service", "CPUSchedulingPolicy") == ([] if name == "ingest" else ["idle"])


def test_the_consumers_start_after_the_broker_which_formats_and_creates_topics(settings: Settings) -> None:
    units = {u.name: u.text for u in unit_files(settings, user="tally")}
    for name in ("ingest", "archiver", "views"):
        text = units[f"tally-{name}.service"]
        assert "tally-broker.service" in values(text, "Unit", "After")[0].split()
        assert "tally-broker.service" in values(text, "Unit", "Wants")[0].split()
    broker = units["tally-broker.service"]
    assert "tally-broker.service" not in values(broker, "Unit", "After")[0]
    assert values(broker, "Service", "ExecStartPre") == [f"{sys.executable} -m ops.systemd prepare-broker"]
    assert values(broker, "Service", "ExecStartPost") == [f"{sys.executable} -m ops.systemd broker-ready"]
    assert values(broker, "Service", "ExecStart")[0].split()[-2:] == [
        "kafka.Kafka",
        str(settings.home_dir / "kafka" / "server.properties"),
    ]


def test_command_lines_are_quoted_and_escaped_for_systemd() -> None:
    assert exec_line(["/usr/bin/python", "-m", "x"]) == "/usr/bin/python -m x"
    assert exec_line(["a b", "50%", "$HOME", 'say "hi"']) == '"a b" 50%% $$HOME "say \\"hi\\""'


def test_other_overrides_go_to_an_env_file_only_its_owner_can_read(settings: Settings, tmp_path: Path) -> None:
    written = write_units(settings, tmp_path / "units", user="tally")
    env_file = tmp_path / "units" / "tally.env"
    assert env_file in written
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    text = env_file.read_text()
    assert "TALLY_INGEST__PORT=8123" in text and "TALLY_WAREHOUSE__SECRET_ACCESS_KEY='s3cr3t value'" in text
    assert "TALLY_HOME" not in text  # in the units' Environment= instead
    assert not any("s3cr3t" in p.read_text() for p in written if p != env_file)


def test_tally_systemd_has_help_and_says_how_to_install(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "tally", "systemd", "--help"], capture_output=True, text=True)
    assert done.returncode == 0 and "usage: tally systemd" in done.stdout and "--out" in done.stdout
    env = {"PATH": "/usr/bin:/bin", "TALLY_HOME": str(tmp_path / "home")}
    out = tmp_path / "units"
    done = subprocess.run(
        [sys.executable, "-m", "tally", "systemd", "--out", str(out)], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    assert "systemctl daemon-reload" in done.stdout and "systemctl enable --now tally.target" in done.stdout
    assert (out / "tally-archiver.service").exists()
