"""Dashboard access under attack, through the real gate (Streamlit's AppTest): login throttling,
password hashing cost, OIDC's verified e-mail, URL text in errors, share links of removed users.

Hashes are built here with hashlib in the stored format: the tests do not lean on the code they test.
"""

from __future__ import annotations

import base64
import hashlib
import io
import secrets
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import dashboard.login
import dashboard.routes
import dashboard.throttle
from dashboard.auth import load_users, read_file_users, write_file_users
from dashboard.sessions import COOKIE_NAME, Sessions
from dashboard.share_links import ShareLinks
from dashboard.throttle import LoginThrottle, PasswordCheck, check_password
from ops.cli import main
from tally.settings import DashboardUser, Settings, load_settings
from tests.unit import markup_reader
from tests.unit.test_dashboard_login import (
    AUTH_SECRETS,
    MARKER,
    gated_page,
    login_client,
    open_as,
    post_login,
    session_of,
)

APP = str(Path(__file__).parents[2] / "dashboard" / "app.py")
ALLOWED_GUESSES = 10  # per user name and client address in 15 minutes (docs/SECURITY.md)
ADMIN_PASSWORD = "admin-secret-password"
ATTACKER, ADMINS_DESK = "203.0.113.66", "198.51.100.7"


def scrypt_hash(password: str, n: int) -> str:
    """A stored hash ``scrypt$n$r$p$salt$digest`` of cost ``n``."""
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=n, r=8, p=1, maxmem=256 * 1024 * 1024, dklen=32)

    def b64(raw: bytes) -> str:
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    return f"scrypt${n}$8$1${b64(salt)}${b64(digest)}"


@pytest.fixture
def admin_and_ann(conf_file: Callable[[str], Settings], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """A conf of sites a.test and b.test and nothing else (no conf/test.yaml: the production
    defaults), with admin (every site) and ann (a.test) users and a browser without a cookie."""
    monkeypatch.setenv("TALLY_DASHBOARD__PASSWORD_SCRYPT_N", "1024")  # cheap hashes: the tests stay fast
    monkeypatch.setattr(dashboard.routes, "FAILURE_DELAY_SECONDS", 0.0)
    monkeypatch.setattr(dashboard.login, "session_cookie", lambda: None)
    settings = conf_file("sites: [{site_id: a.test}, {site_id: b.test}]\n")
    write_file_users(
        settings,
        [
            DashboardUser("admin", scrypt_hash(ADMIN_PASSWORD, 1024), ("*",)),
            DashboardUser("ann", scrypt_hash("ann-secret-password", 1024), ("a.test",), "ann@example.org"),
        ],
    )
    return settings


def page() -> AppTest:
    return AppTest.from_function(gated_page, default_timeout=60)


def texts(app: AppTest) -> str:
    return "\n".join(t.value for t in app.text)


def log_in(monkeypatch: pytest.MonkeyPatch, name: str, password: str, *, address: str = ADMINS_DESK) -> AppTest:
    """Log in through the login route from ``address``; the page as the browser then sees it."""
    response = post_login(login_client(throttle=dashboard.routes.THROTTLE, address=address), name, password)
    open_as(monkeypatch, response.cookies.get(COOKIE_NAME))
    return page().run()


# --- login throttle -----------------------------------------------------------------------------


def test_parallel_guesses_for_one_user_get_no_more_than_the_allowed_attempts(
    admin_and_ann: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many sessions of one dashboard process submit at once; each check is slow, so they overlap."""
    parallel = ALLOWED_GUESSES + 6
    checked: list[str] = []
    lock = threading.Lock()

    def slow_wrong_password(users: object, name: str, password: str, **options: object) -> None:
        with lock:
            checked.append(password)
        time.sleep(1.0)  # every session is inside the password check at the same time

    monkeypatch.setattr(dashboard.throttle, "authenticate", slow_wrong_password)
    throttle, users = LoginThrottle(), load_users(admin_and_ann)
    start = threading.Barrier(parallel)
    outcomes: list[PasswordCheck] = []

    def guess(i: int) -> None:
        start.wait()
        outcomes.append(
            check_password(throttle, users, "admin", f"guess-{i}", address=ATTACKER, now=time.time(), n=1024)
        )

    threads = [threading.Thread(target=guess, args=(i,)) for i in range(parallel)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(outcomes) == parallel and not any(o.user for o in outcomes)
    assert len(checked) <= ALLOWED_GUESSES, f"{len(checked)} of {parallel} parallel guesses reached the check"
    assert sum(o.wait_seconds > 0 for o in outcomes) == parallel - len(checked)


def test_an_attacker_locking_out_admin_from_one_address_does_not_lock_out_admin_elsewhere(
    admin_and_ann: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    throttle = LoginThrottle()
    monkeypatch.setattr(dashboard.routes, "THROTTLE", throttle)
    attacker = login_client(throttle=throttle, address=ATTACKER)
    statuses = [post_login(attacker, "admin", f"guess-{i}").status_code for i in range(ALLOWED_GUESSES + 2)]
    assert statuses[:3] == [401] * 3 and statuses[-1] == 429, statuses
    response = post_login(attacker, "admin", ADMIN_PASSWORD)
    assert response.status_code == 429 and COOKIE_NAME not in response.cookies, "the attacker's address stays throttled"

    app = log_in(monkeypatch, "admin", ADMIN_PASSWORD, address=ADMINS_DESK)
    assert not app.error, [e.value for e in app.error]
    assert MARKER in texts(app) and "viewer=admin" in texts(app)


# --- password hashing ---------------------------------------------------------------------------


def test_new_password_hashes_cost_scrypt_n_2_17_by_default(
    admin_and_ann: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TALLY_DASHBOARD__PASSWORD_SCRYPT_N")
    monkeypatch.setattr(sys, "stdin", io.StringIO("bob-secret-password\n"))
    with pytest.raises(SystemExit) as done:
        main(["user", "add", "bob", "--sites", "a.test", "--password-stdin"])
    assert done.value.code in (0, None)
    stored = next(u.password_hash for u in read_file_users(load_settings()) if u.name == "bob")
    assert stored.startswith("scrypt$131072$8$1$"), stored[:20]


def test_an_old_hash_is_replaced_at_todays_cost_on_the_next_successful_login(
    admin_and_ann: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TALLY_DASHBOARD__PASSWORD_SCRYPT_N")  # the default cost, as in production
    old = scrypt_hash("ann-secret-password", 2**14)  # what Tally stored before
    write_file_users(load_settings(), [DashboardUser("ann", old, ("a.test",))])
    app = log_in(monkeypatch, "ann", "ann-secret-password")
    assert MARKER in texts(app)
    stored = load_users(load_settings())["ann"].password_hash
    assert stored.startswith("scrypt$131072$8$1$") and stored != old
    assert MARKER in texts(app.run()), "the session survives the new hash"
    again = log_in(monkeypatch, "ann", "ann-secret-password")
    assert MARKER in texts(again), "the new hash holds the same password"


@pytest.mark.parametrize(
    "command", [["user", "remove", "ann"], ["user", "add", "ann", "--sites", "a.test", "--replace"]]
)
def test_removing_a_user_or_giving_a_new_password_ends_their_sessions_at_once(
    admin_and_ann: Settings, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    cookie = session_of(admin_and_ann, "ann")
    kept = session_of(admin_and_ann, "admin")
    monkeypatch.setattr(sys, "stdin", io.StringIO("ann-new-password\n"))
    with pytest.raises(SystemExit) as done:
        main([*command, *(["--password-stdin"] if "add" in command else [])])
    assert done.value.code in (0, None)
    assert [r.user for r in Sessions(load_settings()).active(now=time.time())] == ["admin"]
    open_as(monkeypatch, cookie)
    assert MARKER not in texts(page().run())
    open_as(monkeypatch, kept)
    assert MARKER in texts(page().run()), "another user's session goes on"


# --- OIDC -----------------------------------------------------------------------------------------


def oidc_page(settings: Settings, monkeypatch: pytest.MonkeyPatch, identity: dict[str, object]) -> AppTest:
    monkeypatch.setenv("TALLY_DASHBOARD__OIDC", "true")
    app = page()
    app.secrets["auth"] = AUTH_SECRETS
    app.user = identity
    return app.run()


@pytest.mark.parametrize("verified", ["missing", False, "true", None])
def test_an_oidc_email_the_provider_did_not_verify_gets_no_data(
    admin_and_ann: Settings, monkeypatch: pytest.MonkeyPatch, verified: object
) -> None:
    identity: dict[str, object] = {"is_logged_in": True, "email": "ann@example.org"}
    if verified != "missing":
        identity["email_verified"] = verified
    app = oidc_page(admin_and_ann, monkeypatch, identity)
    assert not app.exception
    assert MARKER not in texts(app) and app.error


def test_an_oidc_email_the_provider_verified_logs_the_user_in(
    admin_and_ann: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    identity = {"is_logged_in": True, "email": "ann@example.org", "email_verified": True}
    app = oidc_page(admin_and_ann, monkeypatch, identity)
    assert MARKER in texts(app) and "viewer=ann" in texts(app)


# --- URL text in errors ---------------------------------------------------------------------------

HOSTILE = "[log in again](https://evil.example/phish) ![x](https://evil.example/pixel.png)"


@pytest.mark.parametrize(
    "params",
    [
        {"range": HOSTILE},
        {"range": "custom", "from": HOSTILE, "to": "2026-01-01"},
        {"range": "custom", "from": "2026-01-01", "to": HOSTILE},
        {"goals": f"page:/a,{HOSTILE}"},
        {"funnel": HOSTILE},
    ],
)
def test_a_bad_url_value_is_refused_without_echoing_it(
    admin_and_ann: Settings, monkeypatch: pytest.MonkeyPatch, params: dict[str, str]
) -> None:
    open_as(monkeypatch, session_of(admin_and_ann, "admin"))
    app = AppTest.from_file(APP, default_timeout=60)
    app.query_params.update({"site": "a.test", **params})
    app.run()
    assert not app.exception and app.error, "the view is refused"
    for element in (*app.error, *app.warning, *app.info, *app.markdown, *app.caption, *app.title):
        assert "evil.example" not in str(element.value), element.value
    assert "evil.example" not in markup_reader.text(app)
    assert not markup_reader.figures_shown(app)


# --- share links and their creator --------------------------------------------------------------


@pytest.mark.parametrize("change", ["removed", "lost the site"])
def test_a_share_link_stops_opening_when_its_creator_is_removed_or_loses_the_site(
    admin_and_ann: Settings, change: str
) -> None:
    _, token = ShareLinks(admin_and_ann).create(site="a.test", view={}, days=7, creator="ann", now=time.time())
    app = page()
    app.query_params["share"] = token
    assert MARKER in texts(app.run()), "the link opens while ann may see a.test"

    others = [u for u in read_file_users(admin_and_ann) if u.name != "ann"]
    if change == "lost the site":
        others.append(DashboardUser("ann", scrypt_hash("ann-secret-password", 1024), ("b.test",)))
    write_file_users(admin_and_ann, others)
    app = page()
    app.query_params["share"] = token
    app.run()
    assert not app.exception
    assert MARKER not in texts(app) and app.error
