"""``tally user`` and ``tally share`` round trips in a temporary home and config, and the ``tally up`` login line."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from collections.abc import Callable
from urllib.parse import parse_qs, urlsplit

import pytest

from dashboard.auth import load_users, users_path
from dashboard.passwords import authenticate
from dashboard.share_links import AccessDenied, ShareLinks
from ops.access_commands import dashboard_login_line
from ops.cli import main
from tally.settings import Settings

HELP = [
    "user",
    "user add",
    "user list",
    "user remove",
    "user hash",
    "share",
    "share create",
    "share list",
    "share revoke",
]


@pytest.fixture
def carol_in_conf(conf_file: Callable[[str], Settings]) -> Settings:
    """A conf of sites a.test and b.test whose dashboard.users is carol (every site), with cheap hashes."""
    return conf_file(
        "dashboard:\n  password_scrypt_n: 1024\n"
        "  users:\n    - {name: carol, password_hash: '', sites: ['*'], email: carol@example.org}\n"
        "sites: [{site_id: a.test}, {site_id: b.test}]\n"
    )


def tally(monkeypatch: pytest.MonkeyPatch, *argv: str, stdin: str = "") -> int:
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    with pytest.raises(SystemExit) as done:
        main(list(argv))
    return int(done.value.code or 0)


@pytest.mark.parametrize("command", HELP)
def test_every_user_and_share_command_has_help(command: str) -> None:
    done = subprocess.run([sys.executable, "-m", "tally", *command.split(), "--help"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"usage: tally {command}" in done.stdout


def test_users_round_trip_through_add_list_and_remove_without_printing_secrets(
    carol_in_conf: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        tally(monkeypatch, "user", "add", "ann", "--sites", "a.test", "--password-stdin", stdin="ann-pass-word\n") == 0
    )
    assert tally(monkeypatch, "user", "add", "bob", "--sites", "*", "--password-stdin", stdin="bob-pass-word\n") == 0
    users = load_users(carol_in_conf)
    assert authenticate(users, "ann", "ann-pass-word") is not None and users["ann"].sites == ("a.test",)
    assert tally(monkeypatch, "user", "list") == 0
    out = capsys.readouterr().out
    assert "ann-pass-word" not in out and "scrypt$" not in out
    assert "carol" in out and "config (dashboard.users)" in out and "users.yaml (tally user)" in out
    assert tally(monkeypatch, "user", "remove", "ann") == 0
    assert set(load_users(carol_in_conf)) == {"carol", "bob"}
    assert tally(monkeypatch, "user", "remove", "ann") == 1
    assert "ann-pass-word" not in users_path(carol_in_conf).read_text()


@pytest.mark.parametrize(
    ("argv", "stdin", "message"),
    [
        (
            ["user", "add", "eve", "--sites", "c.test", "--password-stdin"],
            "eve-pass-word\n",
            "c.test is not a configured site",
        ),
        (["user", "add", "eve", "--sites", "a.test", "--password-stdin"], "short\n", "at least 8 characters"),
        (["user", "add", "../x", "--sites", "a.test", "--password-stdin"], "eve-pass-word\n", "use letters, digits"),
        (["user", "add", "carol", "--sites", "a.test", "--password-stdin"], "eve-pass-word\n", "defined in the config"),
        (["user", "remove", "carol"], "", "defined in the config"),
    ],
)
def test_user_add_refuses_bad_input_and_says_what_to_do(
    carol_in_conf: Settings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    stdin: str,
    message: str,
) -> None:
    assert tally(monkeypatch, *argv, stdin=stdin) == 2
    assert message in capsys.readouterr().err
    assert set(load_users(carol_in_conf)) == {"carol"}


def test_adding_an_existing_user_needs_replace_which_ends_their_old_password(
    carol_in_conf: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    tally(monkeypatch, "user", "add", "ann", "--sites", "a.test", "--password-stdin", stdin="first-password\n")
    assert tally(monkeypatch, "user", "add", "ann", "--sites", "b.test", "--password-stdin", stdin="second-pass\n") == 2
    assert (
        tally(
            monkeypatch,
            "user",
            "add",
            "ann",
            "--sites",
            "b.test",
            "--replace",
            "--password-stdin",
            stdin="second-pass\n",
        )
        == 0
    )
    users = load_users(carol_in_conf)
    assert authenticate(users, "ann", "first-password") is None and users["ann"].sites == ("b.test",)


def test_share_links_round_trip_through_create_list_and_revoke(
    carol_in_conf: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["share", "create", "--site", "a.test", "--view", "range=30d&f_page=/pricing", "--days", "3"]
    argv += ["--creator", "carol"]
    assert tally(monkeypatch, *argv, "--base-url", "https://stats.example.org/") == 0
    url = capsys.readouterr().out.strip().splitlines()[-1]
    assert url.startswith("https://stats.example.org/?share=")
    token = parse_qs(urlsplit(url).query)["share"][0]
    grant = ShareLinks(carol_in_conf).read(token, now=time.time())
    assert dict(grant.view) == {"range": "30d", "f_page": "/pricing", "site": "a.test"}
    assert 3 * 86400 - 5 <= grant.expires_at - time.time() <= 3 * 86400
    assert tally(monkeypatch, "share", "list") == 0
    listed = capsys.readouterr().out
    assert grant.link_id in listed and "active" in listed and "range=30d&f_page=/pricing" in listed
    assert token not in listed
    assert tally(monkeypatch, "share", "revoke", grant.link_id) == 0
    with pytest.raises(AccessDenied, match="revoked"):
        ShareLinks(carol_in_conf).read(token, now=time.time())
    tally(monkeypatch, "share", "list")
    assert "revoked" in capsys.readouterr().out
    assert tally(monkeypatch, "share", "revoke", "nope") == 1


@pytest.mark.parametrize(
    ("extra", "message"),
    [(["--site", "c.test"], "not configured"), (["--site", "a.test", "--view", "site=b.test"], "names site")],
)
def test_share_create_refuses_a_site_that_is_not_configured_or_a_view_of_another_site(
    carol_in_conf: Settings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    assert tally(monkeypatch, "share", "create", *extra) == 2
    assert message in capsys.readouterr().err
    assert ShareLinks(carol_in_conf).all() == []


def test_share_create_needs_a_creator_who_may_see_the_site_and_removing_them_ends_their_links(
    carol_in_conf: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    tally(monkeypatch, "user", "add", "ann", "--sites", "a.test", "--password-stdin", stdin="ann-pass-word\n")
    assert tally(monkeypatch, "share", "create", "--site", "b.test", "--creator", "ann") == 2
    assert "may see 'b.test'" in capsys.readouterr().err
    assert tally(monkeypatch, "share", "create", "--site", "a.test") == 2  # the default creator, admin, is absent
    assert tally(monkeypatch, "share", "create", "--site", "a.test", "--creator", "ann") == 0
    token = parse_qs(urlsplit(capsys.readouterr().out.strip().splitlines()[-1]).query)["share"][0]
    assert tally(monkeypatch, "user", "remove", "ann") == 0
    assert "1 share link(s) made by ann no longer open" in capsys.readouterr().out
    with pytest.raises(AccessDenied) as refused:
        ShareLinks(carol_in_conf).read(token, now=time.time())
    assert refused.value.kind == "creator-lost"


def test_tally_up_creates_the_admin_once_and_keeps_showing_its_login_until_it_changes(
    conf_file: Callable[[str], Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh = conf_file("sites: [{site_id: a.test}]\n")  # no users at all
    line = dashboard_login_line(fresh)
    assert line.startswith("dashboard login: admin / ") and "admin-password" in line
    password = line.split(" / ")[1].split(" (saved in")[0]
    assert authenticate(load_users(fresh), "admin", password) is not None
    assert dashboard_login_line(fresh) == line
    tally(monkeypatch, "user", "add", "admin", "--sites", "*", "--replace", "--password-stdin", stdin="new-admin-pw\n")
    assert dashboard_login_line(fresh).startswith("dashboard login: a user of `tally user list`")
