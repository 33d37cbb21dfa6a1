"""The dashboard's gate with Streamlit's AppTest: what an anonymous browser, a user and a share link get."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient
from streamlit.testing.v1 import AppTest

import dashboard.login
import dashboard.routes
from dashboard.auth import load_users, write_file_users
from dashboard.passwords import hash_password
from dashboard.routes import LoginRoutes
from dashboard.sessions import COOKIE_NAME, Sessions
from dashboard.share_links import ShareLinks
from dashboard.throttle import LoginThrottle
from tally.settings import DashboardUser, Settings, load_settings
from tests.unit import markup_reader

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
    logout_button(viewer, settings)
    share_view_button(viewer, settings, {**query, "site": site})
    st.text(f"SECRET FIGURES: 12,345 visitors | site={site} | viewer={viewer.name} | read_only={viewer.read_only}")
    st.text(f"view={sorted(query.items())}")


@pytest.fixture
def ann_signed_up(conf_file: Callable[[str], Settings], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """A conf of sites a.test and b.test with 30-minute sessions, and ann (a.test) a user with a
    password; a wrong password is answered at once."""
    monkeypatch.setattr(dashboard.routes, "FAILURE_DELAY_SECONDS", 0.0)
    settings = conf_file(
        f"dashboard: {{session_minutes: 30, password_scrypt_n: {CHEAP}}}\n"
        "sites: [{site_id: a.test}, {site_id: b.test}]\n"
    )
    write_file_users(settings, [DashboardUser(ANN, hash_password(ANN_PASSWORD, n=CHEAP), ("a.test",))])
    return settings


def page() -> AppTest:
    return AppTest.from_function(gated_page, default_timeout=30)


def texts(app: AppTest) -> str:
    return "\n".join(t.value for t in app.text)


SITE_URL = "http://dash.test"


def open_as(monkeypatch: pytest.MonkeyPatch, cookie: str | None) -> None:
    """The page's browser sends this ``tally_session`` cookie (``st.context.cookies`` in a real browser)."""
    monkeypatch.setattr(dashboard.login, "session_cookie", lambda: cookie)


def session_of(settings: Settings, name: str, *, now: float | None = None) -> str:
    """The cookie of a session of ``name``, as the login route records it."""
    sessions = Sessions(settings)
    return sessions.cookie_value(sessions.create(load_users(settings)[name], now=now or time.time()))


def login_client(
    *, throttle: LoginThrottle | None = None, address: str = "203.0.113.9", base: str = SITE_URL
) -> TestClient:
    """The login and logout routes (as ``dashboard/server.py`` mounts them) behind a test client."""
    routes = LoginRoutes(settings=load_settings, throttle=throttle or LoginThrottle())
    return TestClient(Starlette(routes=routes.routes()), base_url=base, client=(address, 50000))


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "a form with a token"
    return found[1]


def post_login(
    client: TestClient, name: str, password: str, *, origin: str | None = SITE_URL, next_url: str = "/?site=a.test"
) -> Any:  # the test client's response (httpx's, or httpx2's where the MCP SDK installed it)
    token = csrf_of(client.get("/login").text)
    headers = {"Origin": origin} if origin else {}
    form = {"csrf": token, "user": name, "password": password, "next": next_url}
    return client.post("/login", data=form, headers=headers, follow_redirects=False)


def test_an_anonymous_browser_gets_the_login_form_and_no_data(ann_signed_up: Settings) -> None:
    app = page().run()
    assert not app.exception
    form = app.html[0].value
    assert 'action="/login"' in form and 'name="user"' in form and 'type="password"' in form and 'name="csrf"' in form
    assert MARKER not in texts(app) and not markup_reader.figures_shown(app)


@pytest.mark.parametrize(("name", "password"), [(ANN, "wrong-password"), ("mallory", ANN_PASSWORD), ("", "")])
def test_a_wrong_user_or_password_is_refused_with_one_generic_message(
    ann_signed_up: Settings, name: str, password: str
) -> None:
    response = post_login(login_client(), name, password)
    assert response.status_code == 401 and "Wrong user or password." in response.text
    assert COOKIE_NAME not in response.cookies and not Sessions(ann_signed_up).active(now=time.time())


def test_the_right_password_sets_an_http_only_cookie_and_every_tab_with_it_sees_the_page(
    ann_signed_up: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    response = post_login(login_client(), ANN, ANN_PASSWORD)
    assert response.status_code == 303 and response.headers["location"] == "/?site=a.test"
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=lax" in cookie and "Path=/" in cookie and "Max-Age=1800" in cookie
    assert "Secure" not in cookie  # plain http here; over https it is Secure (next test)
    open_as(monkeypatch, response.cookies[COOKIE_NAME])
    app = page().run()
    assert not app.exception and not app.error
    assert MARKER in texts(app) and "site=a.test" in texts(app) and "read_only=False" in texts(app)
    assert not app.html or 'action="/login"' not in app.html[0].value  # no login form
    assert MARKER in texts(app.run()), "a rerun keeps it"
    assert MARKER in texts(page().run()), "so does a new page (a reload, another tab)"


def test_over_https_the_cookie_is_secure(ann_signed_up: Settings) -> None:
    response = post_login(login_client(base="https://dash.test"), ANN, ANN_PASSWORD, origin="https://dash.test")
    assert response.status_code == 303 and "Secure" in response.headers["set-cookie"]


@pytest.mark.parametrize("attack", ["no token", "forged token", "another site", "no origin"])
def test_a_login_post_without_its_token_or_from_another_site_is_refused(ann_signed_up: Settings, attack: str) -> None:
    client = login_client()
    token = {"no token": "", "forged token": f"{int(time.time())}.abc.{'0' * 64}"}.get(attack)
    form = {
        "csrf": csrf_of(client.get("/login").text) if token is None else token,
        "user": ANN,
        "password": ANN_PASSWORD,
    }
    origin = {"another site": "https://evil.example", "no origin": None}.get(attack, SITE_URL)
    response = client.post("/login", data=form, headers={"Origin": origin} if origin else {}, follow_redirects=False)
    assert response.status_code == 403 and COOKIE_NAME not in response.cookies
    assert not Sessions(ann_signed_up).active(now=time.time())


@pytest.mark.parametrize("target", ["//evil.example/x", "https://evil.example/", "/\\evil.example", "javascript:x"])
def test_after_logging_in_the_browser_only_goes_to_a_page_of_this_site(ann_signed_up: Settings, target: str) -> None:
    response = post_login(login_client(), ANN, ANN_PASSWORD, next_url=target)
    assert response.status_code == 303 and response.headers["location"] == "/"


def test_logging_out_ends_the_session_in_every_tab_and_clears_the_cookie(
    ann_signed_up: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = login_client()
    cookie = post_login(client, ANN, ANN_PASSWORD).cookies[COOKIE_NAME]
    open_as(monkeypatch, cookie)
    other_tab = page().run()
    assert MARKER in texts(other_tab)
    logout = page().run().sidebar.html[0].value
    assert 'action="/logout"' in logout
    response = client.post(
        "/logout", data={"csrf": csrf_of(logout)}, headers={"Origin": SITE_URL}, follow_redirects=False
    )
    assert response.status_code == 303 and f'{COOKIE_NAME}=""' in response.headers["set-cookie"]
    assert "Max-Age=0" in response.headers["set-cookie"]
    other_tab.run()
    assert MARKER not in texts(other_tab) and 'action="/login"' in other_tab.html[0].value
    assert any("session has ended" in i.value for i in other_tab.info)


def test_a_logout_from_another_site_or_without_the_sessions_token_changes_nothing(
    ann_signed_up: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = login_client()
    cookie = post_login(client, ANN, ANN_PASSWORD).cookies[COOKIE_NAME]
    other = Sessions(ann_signed_up).form_token("logout", now=time.time(), bound_to="another-session")
    for form, origin in (({"csrf": other}, SITE_URL), ({}, SITE_URL), ({"csrf": other}, "https://evil.example")):
        response = client.post("/logout", data=form, headers={"Origin": origin}, follow_redirects=False)
        assert response.status_code == 403
    open_as(monkeypatch, cookie)
    assert MARKER in texts(page().run())


@pytest.mark.parametrize("case", ["altered", "expired", "revoked", "password changed", "signed by another key"])
def test_an_altered_expired_or_revoked_cookie_shows_the_login_form(
    ann_signed_up: Settings, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    cookie = session_of(ann_signed_up, ANN, now=time.time() - (31 * 60 if case == "expired" else 0))
    if case == "altered":
        cookie = cookie[:-1] + ("0" if cookie[-1] != "0" else "1")
    elif case == "revoked":
        Sessions(ann_signed_up).delete_user(ANN)
    elif case == "password changed":
        write_file_users(ann_signed_up, [DashboardUser(ANN, hash_password("a-new-password", n=CHEAP), ("a.test",))])
    elif case == "signed by another key":
        session_id = cookie.rpartition(".")[0]
        cookie = f"{session_id}.{'ab' * 32}"
    open_as(monkeypatch, cookie)
    app = page().run()
    assert not app.exception
    assert MARKER not in texts(app) and 'action="/login"' in app.html[0].value


def test_a_user_can_share_the_view_they_see_as_a_signed_link(
    ann_signed_up: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    open_as(monkeypatch, session_of(ann_signed_up, ANN))
    app = page()
    app.query_params.update({"site": "a.test", "range": "30d"})
    app.run()
    app.sidebar.button(key="tally-share").click().run()
    url = app.sidebar.code[0].value
    token = parse_qs(urlsplit(url).query)["share"][0]
    grant = ShareLinks(ann_signed_up).read(token, now=time.time())
    assert (grant.site, dict(grant.view)) == ("a.test", {"site": "a.test", "range": "30d"})
    assert ShareLinks(ann_signed_up).all()[0].creator == ANN


def test_a_share_link_viewer_cannot_make_further_links(ann_signed_up: Settings) -> None:
    _, token = ShareLinks(ann_signed_up).create(site="a.test", view={}, days=1, creator=ANN, now=time.time())
    app = page()
    app.query_params["share"] = token
    app.run()
    assert MARKER in texts(app) and not app.sidebar.button and len(ShareLinks(ann_signed_up).all()) == 1


def test_too_many_failures_lock_the_name_even_for_the_right_password(ann_signed_up: Settings) -> None:
    client = login_client(throttle=LoginThrottle(max_attempts=2, free_attempts=2))
    for _ in range(2):
        assert post_login(client, ANN, "guess").status_code == 401
    response = post_login(client, ANN, ANN_PASSWORD)
    assert response.status_code == 429 and "Too many failed logins" in response.text
    assert COOKIE_NAME not in response.cookies and int(response.headers["retry-after"]) > 0


def test_a_user_cannot_open_another_users_site_by_editing_the_url(
    ann_signed_up: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    open_as(monkeypatch, session_of(ann_signed_up, ANN))
    app = page()
    app.query_params["site"] = "b.test"
    app.run()
    assert not app.exception
    assert MARKER not in texts(app)
    assert any("not shared with you" in e.value for e in app.error)
    assert all("b.test" not in e.value for e in app.error)  # the URL's value is not echoed
    app.query_params["site"] = "a.test"
    assert MARKER in texts(app.run())


def test_a_valid_share_link_shows_its_site_and_view_read_only_whatever_else_the_url_says(
    ann_signed_up: Settings,
) -> None:
    write_file_users(ann_signed_up, [*load_users(ann_signed_up).values(), DashboardUser("bea", "", ("b.test",))])
    _, token = ShareLinks(ann_signed_up).create(
        site="b.test", view={"range": "30d", "f_page": "/pricing"}, days=7, creator="bea", now=time.time()
    )
    app = page()
    app.query_params.update({"share": token, "site": "a.test", "range": "90d"})
    app.run()
    assert not app.exception and not app.html
    shown = texts(app)
    assert MARKER in shown and "site=b.test" in shown and "read_only=True" in shown
    assert "view=[('f_page', '/pricing'), ('range', '30d'), ('site', 'b.test')]" in shown
    assert not app.sidebar.button  # no log-out: nobody is logged in
    assert any("read-only" in t.value for t in app.sidebar.text)


def share_token(settings: Settings, *, issued: float, days: float) -> str:
    return ShareLinks(settings).create(site="a.test", view={}, days=days, creator=ANN, now=issued)[1]


@pytest.mark.parametrize("case", ["expired", "tampered", "revoked"])
def test_an_expired_tampered_or_revoked_share_link_is_refused_and_shows_no_data(
    ann_signed_up: Settings, case: str
) -> None:
    if case == "expired":
        token = share_token(ann_signed_up, issued=time.time() - 3 * 86400, days=2)
    elif case == "tampered":
        payload, signature = share_token(ann_signed_up, issued=time.time(), days=2).split(".")
        token = f"{payload}.{signature[:-2]}{'AA' if signature[-2:] != 'AA' else 'BB'}"
    else:
        token = share_token(ann_signed_up, issued=time.time(), days=2)
        links = ShareLinks(ann_signed_up)
        links.revoke(links.all()[-1].link_id, now=time.time())
    app = page()
    app.query_params["share"] = token
    app.run()
    assert not app.exception
    assert MARKER not in texts(app) and not app.html
    expected = {"expired": "expired on", "tampered": "damaged or was altered", "revoked": "was revoked"}[case]
    assert [e.value for e in app.error] == [e.value for e in app.error if expected in e.value] != []


def test_a_bad_share_link_is_refused_even_in_a_logged_in_session(
    ann_signed_up: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    open_as(monkeypatch, session_of(ann_signed_up, ANN))
    app = page()
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
    ann_signed_up: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    identity = {"is_logged_in": True, "email": "carol@example.org", "email_verified": True}
    app = oidc_page(ann_signed_up, monkeypatch, identity)
    assert not app.exception
    assert MARKER in texts(app) and "viewer=carol" in texts(app) and "site=b.test" in texts(app)


def test_an_identity_provider_login_without_a_matching_user_gets_no_data(
    ann_signed_up: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    identity = {"is_logged_in": True, "email": "mallory@example.org", "email_verified": True}
    app = oidc_page(ann_signed_up, monkeypatch, identity)
    assert not app.exception
    assert MARKER not in texts(app) and any("no access to this dashboard" in e.value for e in app.error)


def test_with_oidc_on_an_anonymous_browser_is_offered_the_provider_and_the_password_form(
    ann_signed_up: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = oidc_page(ann_signed_up, monkeypatch, {"is_logged_in": False})
    assert not app.exception and MARKER not in texts(app)
    offered = [b.label for b in app.button if b.label.startswith("Log in with")]
    assert offered == ["Log in with google"] or any("Authlib is not installed" in w.value for w in app.warning)
    assert 'action="/login"' in app.html[0].value  # and the password form
