"""The dashboard's gate with Streamlit's AppTest: what an anonymous browser, a user and a share link get."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from streamlit.testing.v1 import AppTest

import dashboard.login
from dashboard.auth import load_users, session_record, write_file_users
from dashboard.login import SESSION_KEY
from dashboard.passwords import hash_password
from dashboard.share_links import ShareLinks
from dashboard.throttle import LoginThrottle
from tally.settings import DashboardUser, Settings, load_settings

MARKER = "SECRET FIGURES: 12,345 visitors"
ANN = "ann"
ANN_PASSWORD = "ann-secret-password"
CHEAP = 1024  # scrypt N of the test users' hashes and of dashboard.password_scrypt_n here: fast tests


def gated_page() -> None:
    """A stand-in for dashboard/app.py: the gate, the site check, then the private data."""
    import streamlit as st

    from dashboard.login import (
        check_site,
        effective_query,
        logout_button,
        require_viewer,
        share_view_button,
        visible_sites,
    )
    from tally.settings import load_settings

    settings = load_settings()
    viewer = require_viewer(settings)
    query = effective_query(viewer, st.query_params.to_dict())
    site = check_site(viewer, query.get("site") or next(iter(visible_sites(viewer, settings)), None))
    logout_button(viewer)
    share_view_button(viewer, settings, {**query, "site": site})
    st.text(f"SECRET FIGURES: 12,345 visitors | site={site} | viewer={viewer.name} | read_only={viewer.read_only}")
    st.text(f"view={sorted(query.items())}")


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "tally.yaml").write_text(
        f"home: {tmp_path / 'home'}\ndashboard: {{session_minutes: 30, password_scrypt_n: {CHEAP}}}\n"
        "sites: [{site_id: a.test}, {site_id: b.test}]\n"
    )
    monkeypatch.setenv("TALLY_CONF_DIR", str(conf))
    monkeypatch.delenv("TALLY_ENV", raising=False)
    monkeypatch.delenv("TALLY_HOME", raising=False)
    monkeypatch.setattr(dashboard.login, "_THROTTLE", LoginThrottle())
    monkeypatch.setattr(dashboard.login, "FAILURE_DELAY_SECONDS", 0.0)
    settings = load_settings()
    write_file_users(settings, [DashboardUser(ANN, hash_password(ANN_PASSWORD, n=CHEAP), ("a.test",))])
    yield settings


def page() -> AppTest:
    return AppTest.from_function(gated_page, default_timeout=30)


def texts(app: AppTest) -> str:
    return "\n".join(t.value for t in app.text)


def log_in(app: AppTest, name: str, password: str) -> AppTest:
    app.text_input[0].input(name)
    app.text_input[1].input(password)
    return app.form_submit_button[0].click().run()


def logged_in_page(settings: Settings, *, since: float | None = None) -> AppTest:
    app = page()
    user = load_users(settings)[ANN]
    app.session_state[SESSION_KEY] = session_record(user, since if since is not None else time.time())
    return app


def test_an_anonymous_browser_gets_the_login_form_and_no_data(settings: Settings) -> None:
    app = page().run()
    assert not app.exception
    assert [t.label for t in app.text_input] == ["User", "Password"]
    assert MARKER not in texts(app) and not app.metric and not app.dataframe


@pytest.mark.parametrize(("name", "password"), [(ANN, "wrong-password"), ("mallory", ANN_PASSWORD), ("", "")])
def test_a_wrong_user_or_password_is_refused_with_one_generic_message(
    settings: Settings, name: str, password: str
) -> None:
    app = log_in(page().run(), name, password)
    assert not app.exception
    assert [e.value for e in app.error] == ["Wrong user or password."]
    assert MARKER not in texts(app) and SESSION_KEY not in app.session_state


def test_the_right_password_shows_the_page_and_the_session_keeps_it(settings: Settings) -> None:
    app = log_in(page().run(), ANN, ANN_PASSWORD)
    assert not app.exception and not app.error
    assert MARKER in texts(app) and "site=a.test" in texts(app) and "read_only=False" in texts(app)
    assert not app.text_input  # the form is gone
    assert MARKER in texts(app.run())


def test_log_out_ends_the_session(settings: Settings) -> None:
    app = log_in(page().run(), ANN, ANN_PASSWORD)
    app.sidebar.button[0].click().run()
    assert MARKER not in texts(app) and [t.label for t in app.text_input] == ["User", "Password"]


def test_a_user_can_share_the_view_they_see_as_a_signed_link(settings: Settings) -> None:
    app = logged_in_page(settings)
    app.query_params.update({"site": "a.test", "range": "30d"})
    app.run()
    app.sidebar.button(key="tally-share").click().run()
    url = app.sidebar.code[0].value
    token = parse_qs(urlsplit(url).query)["share"][0]
    grant = ShareLinks(settings).read(token, now=time.time())
    assert (grant.site, dict(grant.view)) == ("a.test", {"site": "a.test", "range": "30d"})
    assert ShareLinks(settings).all()[0].creator == ANN


def test_a_share_link_viewer_cannot_make_further_links(settings: Settings) -> None:
    _, token = ShareLinks(settings).create(site="a.test", view={}, days=1, creator=ANN, now=time.time())
    app = page()
    app.query_params["share"] = token
    app.run()
    assert MARKER in texts(app) and not app.sidebar.button and len(ShareLinks(settings).all()) == 1


def test_an_expired_session_asks_for_the_password_again(settings: Settings) -> None:
    app = logged_in_page(settings, since=time.time() - 31 * 60).run()
    assert MARKER not in texts(app) and app.text_input
    assert MARKER in texts(logged_in_page(settings, since=time.time() - 29 * 60).run())


def test_too_many_failures_lock_the_name_even_for_the_right_password(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dashboard.login, "_THROTTLE", LoginThrottle(max_attempts=2, free_attempts=2))
    app = page().run()
    for _ in range(2):
        app = log_in(app, ANN, "guess")
    app = log_in(app, ANN, ANN_PASSWORD)
    assert MARKER not in texts(app)
    assert any("Too many failed logins" in e.value for e in app.error)


def test_a_user_cannot_open_another_users_site_by_editing_the_url(settings: Settings) -> None:
    app = logged_in_page(settings)
    app.query_params["site"] = "b.test"
    app.run()
    assert not app.exception
    assert MARKER not in texts(app)
    assert any("not shared with you" in e.value for e in app.error)
    assert all("b.test" not in e.value for e in app.error)  # the URL's value is not echoed
    app.query_params["site"] = "a.test"
    assert MARKER in texts(app.run())


def test_a_valid_share_link_shows_its_site_and_view_read_only_whatever_else_the_url_says(
    settings: Settings,
) -> None:
    write_file_users(settings, [*load_users(settings).values(), DashboardUser("bea", "", ("b.test",))])
    _, token = ShareLinks(settings).create(
        site="b.test", view={"range": "30d", "f_page": "/pricing"}, days=7, creator="bea", now=time.time()
    )
    app = page()
    app.query_params.update({"share": token, "site": "a.test", "range": "90d"})
    app.run()
    assert not app.exception and not app.text_input
    shown = texts(app)
    assert MARKER in shown and "site=b.test" in shown and "read_only=True" in shown
    assert "view=[('f_page', '/pricing'), ('range', '30d'), ('site', 'b.test')]" in shown
    assert not app.sidebar.button  # no log-out: nobody is logged in
    assert any("read-only" in t.value for t in app.sidebar.text)


def share_token(settings: Settings, *, issued: float, days: float) -> str:
    return ShareLinks(settings).create(site="a.test", view={}, days=days, creator=ANN, now=issued)[1]


@pytest.mark.parametrize("case", ["expired", "tampered", "revoked"])
def test_an_expired_tampered_or_revoked_share_link_is_refused_and_shows_no_data(settings: Settings, case: str) -> None:
    if case == "expired":
        token = share_token(settings, issued=time.time() - 3 * 86400, days=2)
    elif case == "tampered":
        payload, signature = share_token(settings, issued=time.time(), days=2).split(".")
        token = f"{payload}.{signature[:-2]}{'AA' if signature[-2:] != 'AA' else 'BB'}"
    else:
        token = share_token(settings, issued=time.time(), days=2)
        links = ShareLinks(settings)
        links.revoke(links.all()[-1].link_id, now=time.time())
    app = page()
    app.query_params["share"] = token
    app.run()
    assert not app.exception
    assert MARKER not in texts(app) and not app.text_input
    expected = {"expired": "expired on", "tampered": "damaged or was altered", "revoked": "was revoked"}[case]
    assert [e.value for e in app.error] == [e.value for e in app.error if expected in e.value] != []


def test_a_bad_share_link_is_refused_even_in_a_logged_in_session(settings: Settings) -> None:
    app = logged_in_page(settings)
    app.query_params["share"] = "not-a-token"
    app.run()
    assert MARKER not in texts(app) and app.error


AUTH_SECRETS = {
    "redirect_uri": "http://127.0.0.1:8792/oauth2callback",
    "cookie_secret": "c" * 32,
    "google": {
        "client_id": "id",
        "client_secret": "secret",
        "server_metadata_url": "https://accounts.google.com/.well-known/openid-configuration",
    },
}


def oidc_page(settings: Settings, monkeypatch: pytest.MonkeyPatch, identity: dict[str, object]) -> AppTest:
    monkeypatch.setenv("TALLY_DASHBOARD__OIDC", "true")
    write_file_users(
        settings,
        [
            DashboardUser(ANN, hash_password(ANN_PASSWORD, n=CHEAP), ("a.test",)),
            DashboardUser("carol", "", ("b.test",), "Carol@Example.org"),
        ],
    )
    app = page()
    app.secrets["auth"] = AUTH_SECRETS
    app.user = identity
    return app.run()


def test_an_identity_provider_login_maps_to_the_user_with_that_email(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    identity = {"is_logged_in": True, "email": "carol@example.org", "email_verified": True}
    app = oidc_page(settings, monkeypatch, identity)
    assert not app.exception
    assert MARKER in texts(app) and "viewer=carol" in texts(app) and "site=b.test" in texts(app)


def test_an_identity_provider_login_without_a_matching_user_gets_no_data(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    identity = {"is_logged_in": True, "email": "mallory@example.org", "email_verified": True}
    app = oidc_page(settings, monkeypatch, identity)
    assert not app.exception
    assert MARKER not in texts(app) and any("no access to this dashboard" in e.value for e in app.error)


def test_with_oidc_on_an_anonymous_browser_is_offered_the_provider_and_the_password_form(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = oidc_page(settings, monkeypatch, {"is_logged_in": False})
    assert not app.exception and MARKER not in texts(app)
    offered = [b.label for b in app.button if b.label.startswith("Log in with")]
    assert offered == ["Log in with google"] or any("Authlib is not installed" in w.value for w in app.warning)
    assert [t.label for t in app.text_input] == ["User", "Password"]
