"""The dashboard's gate: nothing of the page renders until :func:`require_viewer` returns a viewer.

Call it first thing on the page (after ``st.set_page_config``)::

    viewer = require_viewer(settings)
    site_id = check_site(viewer, query.get("site") or visible_sites(viewer, settings)[0])
    logout_button(viewer)

``?share=<token>`` opens a read-only view pinned to the link's site and view; otherwise the
visitor logs in with a password (the session lasts ``dashboard.session_minutes``) or, when
``dashboard.oidc`` is on and ``.streamlit/secrets.toml`` has an ``[auth]`` section, through
the identity provider (``st.login``), mapped to a user by its verified e-mail. Refusals say why
and stop the script, so an anonymous browser receives no data at all.

Password guesses are throttled per (user name, client address) (``dashboard/throttle.py``),
counted before the password is checked.
"""

from __future__ import annotations

import importlib.util
import logging
import math
import time
from collections.abc import Mapping
from typing import Any, NoReturn

import streamlit as st

from dashboard.auth import (
    Viewer,
    effective_query,
    load_users,
    oidc_providers,
    session_record,
    session_user,
    upgrade_password_hash,
    user_for_email,
    viewer_for_user,
    visible_sites,
)
from dashboard.share_links import AccessDenied, ShareLinks, share_url
from dashboard.throttle import LoginThrottle, check_password
from tally.settings import DashboardUser, Settings, SettingsError

__all__ = ["SESSION_KEY", "check_site", "effective_query", "logout_button", "require_viewer", "visible_sites"]

log = logging.getLogger("tally.dashboard.login")

SESSION_KEY = "_tally_login"
FAILURE_DELAY_SECONDS = 0.5  # slows scripted guessing within one session; the throttle bounds it across sessions
_THROTTLE = LoginThrottle()  # module state: shared by every session of this dashboard process
LOCAL_CLIENT = "local"  # the address of a browser on this machine (Streamlit reports none for loopback)


def _refuse(message: str) -> NoReturn:
    st.error(message)
    st.stop()


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
    user = session_user(st.session_state.get(SESSION_KEY), users, now=now, minutes=settings.dashboard.session_minutes)
    if user is not None:
        return viewer_for_user(user, settings, login="password")
    st.session_state.pop(SESSION_KEY, None)  # expired or stale (user removed, password changed)
    providers = _oidc_providers() if settings.dashboard.oidc else []
    if providers:
        viewer = _oidc_viewer(settings, users)
        if viewer is not None:
            return viewer
    _login_page(settings, users, providers, now)
    st.stop()


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


def client_address() -> str:
    """The browser's address as Streamlit saw it (``st.context.ip_address``), or ``local`` on this machine.

    Streamlit (1.67, on uvicorn) takes ``X-Forwarded-For`` into account only from a proxy on
    127.0.0.1 (uvicorn's ``FORWARDED_ALLOW_IPS``). Behind any other proxy, or one that does not
    send the header, every browser has the proxy's address.
    """
    address = st.context.ip_address
    return address if isinstance(address, str) and address else LOCAL_CLIENT  # a test harness may give a stand-in


def _wait_text(seconds: float) -> str:
    return f"{math.ceil(seconds)} s" if seconds < 60 else f"{math.ceil(seconds / 60)} min"


def _login_page(
    settings: Settings, users: Mapping[str, DashboardUser], providers: list[str | None], now: float
) -> None:
    st.title("Tally")
    st.caption("Analytics data is private: log in to see the sites shared with you.")
    if providers and importlib.util.find_spec("authlib") is None:
        st.warning("Single sign-on is configured but Authlib is not installed: `pip install 'streamlit[auth]'`.")
        providers = []
    for provider in providers:
        if st.button(f"Log in with {provider or 'single sign-on'}", key=f"tally-oidc-{provider}"):
            st.login(provider)
    with st.form("tally-login", clear_on_submit=True):
        name = st.text_input("User", autocomplete="username")
        password = st.text_input("Password", type="password", autocomplete="current-password")
        submitted = st.form_submit_button("Log in")
    if not submitted:
        return
    cost = settings.dashboard.password_scrypt_n
    checked = check_password(_THROTTLE, users, name, password, address=client_address(), now=now, n=cost)
    if checked.wait_seconds > 0:
        log.warning("dashboard login throttled", extra={"fields": {"user": repr(name[:64])}})
        wait = _wait_text(checked.wait_seconds)
        st.error(f"Too many failed logins for this user name from your address: try again in {wait}.")
        return
    if checked.user is None:
        log.warning("dashboard login failed", extra={"fields": {"user": repr(name[:64])}})
        time.sleep(FAILURE_DELAY_SECONDS)
        st.error("Wrong user or password.")
        return
    user = upgrade_password_hash(settings, checked.user, password)
    log.info("dashboard login", extra={"fields": {"user": user.name}})
    st.session_state[SESSION_KEY] = session_record(user, now)
    st.rerun()


def check_site(viewer: Viewer, site_id: str | None) -> str:
    """``site_id`` if the viewer may see it; otherwise a refusal and ``st.stop()``.

    The message is the same for a site that does not exist and one not granted, and it does not
    echo the URL's value (it is attacker-controlled text).
    """
    if site_id is None or not viewer.may_see(site_id):
        _refuse("This site does not exist or is not shared with you. Pick one of your sites from the list.")
    return site_id


def logout_button(viewer: Viewer) -> None:
    """The sidebar's "Log out" (for a share link: what it shows and until when, as plain text)."""
    if viewer.login == "share":
        until = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(viewer.expires_at or 0))
        st.sidebar.text(f"Shared view, read-only, until {until}.")
        return
    st.sidebar.text(f"Logged in as {viewer.name}")
    if st.sidebar.button("Log out", key="tally-logout"):
        st.session_state.pop(SESSION_KEY, None)
        log.info("dashboard logout", extra={"fields": {"user": viewer.name}})
        if viewer.login == "oidc":
            st.logout()  # clears the identity cookie and starts a new session
        else:
            st.rerun()


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
        base = st.context.url or f"http://{settings.dashboard.host}:{settings.dashboard.port}"
        st.sidebar.code(share_url(base, token), language=None)
        st.sidebar.caption(f"Link {link.link_id}; revoke it with `tally share revoke {link.link_id}`.")
