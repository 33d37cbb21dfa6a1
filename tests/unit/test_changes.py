"""The settings' audit trail: each change to a user, an API key or a share link made with `tally`
is one appended line naming who, how, the site and what changed, never a secret; `tally changes`
and the dashboard (for users granted every site) show it. Site changes go through Kafka and are
checked against a real broker (tests/integration/test_sites_runtime.py)."""

from __future__ import annotations

import getpass
import io
from typing import Any

import pytest

from dashboard.page import CHANGES_OPEN
from ops.cli import main
from tally.changes import folder, load_changes, record_change, record_site_change
from tally.settings import Settings, SiteSettings
from tests.unit import markup_reader
from tests.unit.dashboard_page import logged_in

pytestmark = pytest.mark.usefixtures("dashboard_cookies")
SITE = "demo.tally.local"


def tally(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as done:
        main(list(args))
    printed = capsys.readouterr()
    return int(done.value.code or 0), printed.out + printed.err


def test_users_keys_and_share_links_changed_with_tally_are_each_one_line_naming_who(
    settings: Settings, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("correct horse battery\n"))
    assert tally(capsys, "user", "add", "bea", "--sites", SITE, "--password-stdin")[0] == 0
    code, out = tally(capsys, "apikey", "create", "--name", "reports", "--sites", SITE)
    assert code == 0
    secret = out.splitlines()[0]
    code, out = tally(capsys, "share", "create", "--site", SITE, "--creator", "bea", "--days", "2")
    assert code == 0, out
    link_id = out.split()[2].rstrip(":")
    assert tally(capsys, "share", "revoke", link_id)[0] == 0
    assert tally(capsys, "user", "remove", "bea")[0] == 0
    changes = load_changes(settings)
    assert [(c.subject, c.action, c.site_id) for c in changes] == [
        ("user", "add", SITE),
        ("api key", "create", SITE),
        ("share link", "create", SITE),
        ("share link", "revoke", SITE),
        ("user", "remove", SITE),
    ]
    assert {c.actor for c in changes} == {getpass.getuser()} and {c.via for c in changes} == {"command line"}
    assert "bea: sites demo.tally.local" in changes[0].detail and link_id in changes[2].detail
    trail = (folder(settings) / "changes.jsonl").read_text()
    assert secret not in trail and "correct horse" not in trail  # ids only, never a key or a password
    code, out = tally(capsys, "changes", "--site", SITE)
    assert code == 0 and "share link revoke" in out and "user remove" in out
    code, out = tally(capsys, "changes", "--site", "limited.tally.test")
    assert "no settings changes recorded yet" in out


def test_the_trail_is_appended_to_never_rewritten_and_a_torn_line_is_skipped(settings: Settings) -> None:
    site = SiteSettings(SITE, domains=("demo.tally.local",))
    record_site_change(settings, actor="ana", via="api", before=None, after=site)
    path = folder(settings) / "changes.jsonl"
    first = path.read_bytes()
    moved = SiteSettings(SITE, domains=("demo.tally.local",), timezone="Europe/Berlin", salt_period="week")
    record_site_change(settings, actor="ana", via="api", before=site, after=moved)
    assert path.read_bytes().startswith(first)  # appended
    with path.open("a") as torn:
        torn.write('{"at": "2026-')  # a disk that filled mid-line
    record_change(settings, actor="ana", via="api", site_id=SITE, subject="site", action="remove")
    changes = load_changes(settings)
    assert [c.action for c in changes] == ["add", "change", "remove"]
    assert changes[1].detail == "salt_period: day → week; timezone: UTC → Europe/Berlin"
    assert path.stat().st_mode & 0o777 == 0o600


def test_users_granted_every_site_see_the_trail_on_the_page_and_others_do_not(settings: Settings) -> None:
    record_change(settings, actor="ana", via="dashboard", site_id=SITE, subject="share link", action="create")
    record_change(settings, actor="ops", via="api", site_id="limited.tally.test", subject="site", action="remove")

    def page(sites: tuple[str, ...]) -> Any:
        app = logged_in(settings, sites)
        app.session_state[CHANGES_OPEN] = True  # what opening the expander does
        return app.run()

    admin = page(("*",))
    assert not admin.exception
    rows = markup_reader.tables(admin)["settings-changes"]
    assert list(rows["Change"]) == ["share link create"]  # this site's only
    one_site = page((SITE,))
    assert not one_site.exception and "settings-changes" not in markup_reader.tables(one_site)
