"""Dashboard sessions in Chromium: a login survives reloads and new tabs, a logout ends it in every
tab, a bad cookie gets the login form, and share links open without any login."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from dashboard.auth import load_users
from dashboard.sessions import COOKIE_NAME, Sessions
from tally.settings import Settings, load_settings
from tests.e2e.conftest import RunningStack
from tests.e2e.test_dashboard import FIGURES, SITE, log_in

LOGIN_FORM = "text=Analytics data is private"
REPORT = "text=Figures as of"


@pytest.fixture
def stack_settings(stack: RunningStack, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    """The running stack's settings, as its dashboard reads them."""
    for key, value in stack.env.items():
        monkeypatch.setenv(key, value)
    yield load_settings()


def test_a_login_survives_reloads_and_new_tabs_and_a_logout_ends_it_in_every_tab(
    stack: RunningStack, browser: Any
) -> None:
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    try:
        first = context.new_page()
        first.goto(f"{stack.dashboard_url}/?range=today")
        first.wait_for_selector(LOGIN_FORM, timeout=60000)
        log_in(first, stack)
        assert "range=today" in first.url, "the login returns to the view asked for"
        cookie = next(c for c in context.cookies() if c["name"] == COOKIE_NAME)
        assert cookie["httpOnly"] and cookie["sameSite"] == "Lax" and cookie["expires"] > time.time() + 3600
        assert first.evaluate("document.cookie").find(COOKIE_NAME) == -1, "page scripts cannot read the session"

        first.reload()
        first.wait_for_selector(REPORT, timeout=60000)
        second = context.new_page()
        second.goto(stack.dashboard_url)
        second.wait_for_selector(REPORT, timeout=60000)
        assert second.locator(LOGIN_FORM).count() == 0

        first.get_by_role("button", name="Log out").click()
        first.wait_for_selector(LOGIN_FORM, timeout=60000)
        assert not [c for c in context.cookies() if c["name"] == COOKIE_NAME], "the cookie is cleared"
        # The other tab is out at its next action; its live figures refresh every few seconds, so
        # that comes without a click too.
        second.wait_for_selector("text=Your session has ended", timeout=60000)
        assert second.locator(FIGURES).count() == 0
    finally:
        context.close()


@pytest.mark.parametrize("case", ["altered", "expired", "revoked"])
def test_an_altered_expired_or_revoked_cookie_gets_the_login_form(
    stack: RunningStack, browser: Any, stack_settings: Settings, case: str
) -> None:
    sessions = Sessions(stack_settings)
    admin = load_users(stack_settings)["admin"]
    long_ago = time.time() - (stack_settings.dashboard.session_minutes + 1) * 60
    session_id = sessions.create(admin, now=long_ago if case == "expired" else time.time())
    value = sessions.cookie_value(session_id)
    if case == "altered":
        value = value[:-1] + ("0" if value[-1] != "0" else "1")
    elif case == "revoked":
        sessions.delete(session_id)
    context = browser.new_context()
    try:
        context.add_cookies([{"name": COOKIE_NAME, "value": value, "url": stack.dashboard_url, "httpOnly": True}])
        page = context.new_page()
        page.goto(stack.dashboard_url)
        page.wait_for_selector(LOGIN_FORM, timeout=60000)
        assert page.locator(FIGURES).count() == 0
    finally:
        context.close()


def test_a_share_link_opens_without_any_login(stack: RunningStack, browser: Any) -> None:
    made = stack.tally("share", "create", "--site", SITE, "--view", "range=today", "--days", "1")
    assert made.returncode == 0, made.stdout + made.stderr
    url = re.search(r"https?://\S+share=\S+", made.stdout)
    assert url, made.stdout
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(url[0])
        page.wait_for_selector(REPORT, timeout=60000)
        assert page.get_by_text("read-only", exact=False).count() > 0
        assert not [c for c in context.cookies() if c["name"] == COOKIE_NAME]
    finally:
        context.close()
