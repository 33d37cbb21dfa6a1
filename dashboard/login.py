"""The dashboard's gate: nothing of the page renders until :func:`require_viewer` returns a viewer.

Call it first thing on the page (after ``st.set_page_config``)::

    viewer = require_viewer(settings)
    site_id = check_site(viewer, query.get("site") or visible_sites(viewer, settings)[0])
    logout_button(viewer)

``?share=<token>`` opens a read-only view pinned to the link's site and view; otherwise the page
reads the ``tally_session`` cookie (``st.context.cookies``, sent with the page's connection) and
looks its session up on the server (``dashboard/sessions.py``). Without a current session it
shows the login form, which posts to ``/login`` (``dashboard/routes.py``: the throttle, the
password check and the cookie are there, since a page cannot set an ``HttpOnly`` cookie). When
``dashboard.oidc`` is on and ``.streamlit/secrets.toml`` has an ``[auth]`` section, the form
also offers the identity provider (``st.login``), mapped to a user by its verified e-mail.
Refusals say why and stop the script, so an anonymous browser receives no data at all.
"""

from __future__ import annotations

import importlib.util
import logging
import time
from collections.abc import Mapping
from typing import Any, NoReturn
from urllib.parse import urlencode

import streamlit as st

from dashboard.auth import (
    Viewer,
    effective_query,
    load_users,
    oidc_providers,
    user_for_email,
    viewer_for_user,
    visible_sites,
)
from dashboard.forms import login_form, logout_form
from dashboard.sessions import COOKIE_NAME, Sessions
from dashboard.share_links import AccessDenied, ShareLinks, record_share_link, share_url
from tally.changes import DASHBOARD
from tally.settings import DashboardUser, Settings, SettingsError

__all__ = ["check_site", "effective_query", "logout_button", "require_viewer", "still_allowed", "visible_sites"]

log = logging.getLogger("tally.dashboard.login")


def _refuse(message: str) -> NoReturn:
    st.error(message)
    st.stop()


def session_cookie() -> str | None:
    """The ``tally_session`` cookie the browser sent with this page's connection (``st.context.cookies``)."""
    try:
        value = st.context.cookies.get(COOKIE_NAME)
    except (AttributeError, RuntimeError):  # no browser connection (a test harness)
        return None
    return value if isinstance(value, str) else None


def require_viewer(settings: Settings) -> Viewer:
    """The viewer of this page run, or a login form / refusal and ``st.stop()`` (nothing else renders)."""
    now = time.time()
    token = st.query_params.get("share")
    try:
        if token:
            return _share_viewer(settings, token, now)
        users = load_users(settings)
    except SettingsError as e:
        log.error("dashboard access config unreadable", extra={"fields": {"error": str(e)}})
        _refuse("The dashboard's access settings cannot be read; an administrator must fix them (see the logs).")
    cookie = session_cookie()
    user = Sessions(settings).user(cookie, users, now=now)
    if user is not None:
        return viewer_for_user(user, settings, login="password")
    providers = _oidc_providers() if settings.dashboard.oidc else []
    if providers:
        viewer = _oidc_viewer(settings, users)
        if viewer is not None:
            return viewer
    _login_page(settings, providers, now, ended=cookie is not None)
    st.stop()


def still_allowed(settings: Settings, viewer: Viewer) -> bool:
    """Whether the viewer of this page may still look: for the live figures, which rerun without the gate.

    A password session must still be on record (not logged out in another tab, revoked or
    expired); a share link must still open. A single sign-on login lasts as long as its cookie.
    """
    now = time.time()
    try:
        if viewer.login == "share":
            ShareLinks(settings).read(st.query_params.get("share", ""), now=now)
            return True
        if viewer.login == "password":
            user = Sessions(settings).user(session_cookie(), load_users(settings), now=now)
            return user is not None and user.name == viewer.name
    except (AccessDenied, SettingsError):
        return False
    return True


def _share_viewer(settings: Settings, token: str, now: float) -> Viewer:
    try:
        grant = ShareLinks(settings).read(token, now=now)
    except AccessDenied as e:
        log.info("share link refused", extra={"fields": {"kind": e.kind}})
        st.title("Tally")
        _refuse(f"{e.reason}.")
    return Viewer(
        name=f"share link {grant.link_id}",
        sites=frozenset({grant.site}),
        configured_sites=frozenset({grant.site}),
        pinned_view=dict(grant.view),
        read_only=True,
        login="share",
        expires_at=grant.expires_at,
    )


def _oidc_providers() -> list[str | None]:
    try:
        if not st.secrets.load_if_toml_exists():
            return []
        section = st.secrets.get("auth")
    except (FileNotFoundError, KeyError) as e:
        log.warning("no [auth] secrets for OIDC", extra={"fields": {"error": str(e)}})
        return []
    return oidc_providers(section) if isinstance(section, Mapping) else []


def _oidc_viewer(settings: Settings, users: Mapping[str, DashboardUser]) -> Viewer | None:
    identity: Mapping[str, Any] = st.user.to_dict()
    if not identity.get("is_logged_in"):
        return None
    verified = identity.get("email_verified")
    user = user_for_email(users.values(), identity.get("email"), verified=verified)
    if user is None:
        if verified is not True:
            log.warning("oidc login refused", extra={"fields": {"reason": "email_verified is not true"}})
            st.error(
                "Your sign-in worked, but your identity provider did not confirm that it verified your e-mail "
                "address (`email_verified`), so it cannot be matched to a user. Verify the address with your "
                "provider, or ask an administrator to use a provider that sends `email_verified`."
            )
        else:
            st.error(
                "Your sign-in worked, but that account has no access to this dashboard. Ask an administrator "
                "to add your e-mail address to a user (`tally user add NAME --sites … --email …`)."
            )
        if st.button("Log out"):
            st.logout()
        st.stop()
    return viewer_for_user(user, settings, login="oidc")


def _next_url() -> str:
    """This page's address (path and view), where the login form returns to."""
    query = {key: value for key, value in st.query_params.to_dict().items() if key != "share"}
    return "/?" + urlencode(query) if query else "/"


def _login_page(settings: Settings, providers: list[str | None], now: float, *, ended: bool) -> None:
    st.title("Tally")
    st.caption("Analytics data is private: log in to see the sites shared with you.")
    if ended:
        st.info("Your session has ended (logged out, expired or revoked): log in again.")
    if providers and importlib.util.find_spec("authlib") is None:
        st.warning("Single sign-on is configured but Authlib is not installed: `pip install 'streamlit[auth]'`.")
        providers = []
    for provider in providers:
        if st.button(f"Log in with {provider or 'single sign-on'}", key=f"tally-oidc-{provider}"):
            st.login(provider)
    token = Sessions(settings).form_token("login", now=now)
    st.html(login_form(token, next_url=_next_url()))


def check_site(viewer: Viewer, site_id: str | None) -> str:
    """``site_id`` if the viewer may see it; otherwise a refusal and ``st.stop()``.

    The message is the same for a site that does not exist and one not granted, and it does not
    echo the URL's value (it is attacker-controlled text).
    """
    if site_id is None or not viewer.may_see(site_id):
        _refuse("This site does not exist or is not shared with you. Pick one of your sites from the list.")
    return site_id


def logout_button(viewer: Viewer, settings: Settings) -> None:
    """The sidebar's "Log out", a form posting to ``/logout`` (for a share link: what it shows and until when)."""
    if viewer.login == "share":
        until = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(viewer.expires_at or 0))
        st.sidebar.text(f"Shared view, read-only, until {until}.")
        return
    st.sidebar.text(f"Logged in as {viewer.name}")
    if viewer.login == "oidc":
        if st.sidebar.button("Log out", key="tally-logout"):
            log.info("dashboard logout", extra={"fields": {"user": viewer.name}})
            st.logout()  # clears the identity cookie and starts a new session
        return
    sessions = Sessions(settings)
    session_id = sessions.session_id(session_cookie())
    if session_id is not None:  # the form posts to /logout, which deletes the record and clears the cookie
        st.sidebar.html(logout_form(sessions.form_token("logout", now=time.time(), bound_to=session_id)))


def share_view_button(viewer: Viewer, settings: Settings, view: Mapping[str, str]) -> None:
    """A sidebar control that makes a share link of the current view (not offered to read-only viewers)."""
    site = view.get("site", "")
    if viewer.read_only or not viewer.may_see(site):
        return
    days = settings.dashboard.share_link_days
    if st.sidebar.button(f"Share this view ({days} days, read-only)", key="tally-share"):
        link, token = ShareLinks(settings).create(
            site=site, view=effective_query(viewer, view), days=days, creator=viewer.name, now=time.time()
        )
        record_share_link(settings, link, actor=viewer.name, via=DASHBOARD)
        base = st.context.url or f"http://{settings.dashboard.host}:{settings.dashboard.port}"
        st.sidebar.code(share_url(base, token), language=None)
        st.sidebar.caption(f"Link {link.link_id}; revoke it with `tally share revoke {link.link_id}`.")
