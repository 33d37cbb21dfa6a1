"""``tally site``: its help, and errors that say what to do next (Kafka-free; tests/integration/test_sites_runtime.py
runs the commands against a real broker)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from ops import site_commands
from ops.cli import build_parser
from ops.stack import free_ports
from tally.settings import KafkaSettings, Settings, SiteSettings
from tally.site_registry import SiteRegistry


@pytest.fixture(autouse=True)
def one_configured_site(monkeypatch: pytest.MonkeyPatch) -> None:
    """conf's sites are a.example alone: the seed the commands fold the topic's records into."""
    monkeypatch.setenv("TALLY_SITES", "[{site_id: a.example, domains: [a.example]}]")


@pytest.fixture
def seed_only(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bytes]]:
    """The topic as empty (the seed alone) and the records the command would write, kept in a list."""
    written: list[tuple[str, bytes]] = []
    monkeypatch.setattr(site_commands, "current_sites", lambda settings, **_: SiteRegistry(seed=settings.sites))
    monkeypatch.setattr(
        site_commands, "write_record", lambda settings, site_id, value, **_: written.append((site_id, value))
    )
    return written


def run(settings: Settings, *argv: str) -> int:
    args = build_parser().parse_args(["site", *argv])
    code: int = args.handler(args, settings)
    return code


@pytest.mark.parametrize("action", [[], ["add"], ["list"], ["remove"]])
def test_every_site_command_has_help(action: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tally", "site", *action, "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0
    assert "usage: tally site" in done.stdout


def test_add_help_names_every_site_option() -> None:
    done = subprocess.run([sys.executable, "-m", "tally", "site", "add", "--help"], capture_output=True, text=True)
    for option in (
        "--domains",
        "--salt-period",
        "--hash-routing",
        "--query-params",
        "--client-pageviews-per-hour",
        "--honour-opt-out",
        "--goals",
        "--timezone",
        "--replace",
    ):
        assert option in done.stdout


def test_a_bad_salt_period_is_refused_with_the_periods_to_choose_from(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["site", "add", "c.example", "--domains", "c.example", "--salt-period", "fortnight"])
    assert exited.value.code == 2
    assert "choose from" in capsys.readouterr().err


def test_add_without_domains_says_to_give_them(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["site", "add", "c.example"])
    assert "--domains" in capsys.readouterr().err


def test_a_url_for_a_domain_is_refused_naming_what_to_write(
    settings: Settings, seed_only: list[tuple[str, bytes]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(settings, "add", "c.example", "--domains", "https://c.example/") == 2
    assert "e.g. example.com,www.example.com" in capsys.readouterr().err
    assert seed_only == []


def test_adding_a_site_writes_its_record_with_every_option(
    settings: Settings, seed_only: list[tuple[str, bytes]], capsys: pytest.CaptureFixture[str]
) -> None:
    from tally.site_registry import decode_record

    argv = [
        "add",
        "c.example",
        "--domains",
        "c.example,www.c.example",
        "--salt-period",
        "week",
        "--hash-routing",
        "--query-params",
        "ref,lang",
        "--client-pageviews-per-hour",
        "50",
        "--honour-opt-out",
        "--timezone",
        "Asia/Kolkata",
    ]
    assert run(settings, *argv) == 0
    ((site_id, value),) = seed_only
    site = decode_record(site_id.encode(), value).site
    assert site == SiteSettings(
        "c.example",
        domains=("c.example", "www.c.example"),
        salt_period="week",
        hash_routing=True,
        query_params=("ref", "lang"),
        client_pageviews_per_hour=50,
        honour_opt_out=True,
        timezone="Asia/Kolkata",
    )
    assert "added site c.example" in capsys.readouterr().out


def test_adding_a_configured_site_again_says_to_use_replace(
    settings: Settings, seed_only: list[tuple[str, bytes]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(settings, "add", "a.example", "--domains", "a.example") == 2
    assert "--replace" in capsys.readouterr().err
    assert run(settings, "add", "a.example", "--domains", "a.example", "--replace") == 0
    assert [site_id for site_id, _ in seed_only] == ["a.example"]


def test_removing_an_unknown_site_names_the_configured_ones_and_tally_site_list(
    settings: Settings, seed_only: list[tuple[str, bytes]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(settings, "remove", "nowhere.example") == 2
    err = capsys.readouterr().err
    assert "no site 'nowhere.example'" in err and "a.example" in err and "tally site list" in err
    assert seed_only == []


def test_without_kafka_the_commands_say_to_start_it(settings: Settings) -> None:
    (port,) = free_ports(1)  # a port nothing listens on
    no_broker = dataclasses.replace(settings, kafka=KafkaSettings(port=port))
    with pytest.raises(site_commands.SiteCommandError, match=r"does not answer.*tally up.*a\.example") as raised:
        site_commands.current_sites(no_broker, timeout=1.0)
    assert raised.value.code == 1


def test_a_zone_that_is_not_iana_is_refused_naming_the_option(
    settings: Settings, seed_only: list[tuple[str, bytes]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(settings, "add", "c.example", "--domains", "c.example", "--timezone", "Mars/Olympus") == 2
    assert "timezone" in capsys.readouterr().err
    assert seed_only == []
