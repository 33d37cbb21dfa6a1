"""The dashboard's whole page under Streamlit's AppTest, for a logged-in user: no server, no browser.

A test module that draws the page uses the ``dashboard_cookies`` fixture (tests/unit/conftest.py),
which makes the page read its session cookie from :data:`BROWSER`, empty at each test's start."""

from __future__ import annotations

import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

from dashboard.auth import write_file_users
from dashboard.passwords import hash_password
from dashboard.sessions import Sessions
from tally.settings import DashboardUser, Settings

APP = str(Path(__file__).parents[2] / "dashboard" / "app.py")
BROWSER: dict[str, str] = {}  # the cookies the page's browser sends (st.context.cookies in a real one)


def logged_in(settings: Settings, sites: tuple[str, ...] = ("*",)) -> AppTest:
    """The app with a logged-in user granted ``sites`` (a session as the login route leaves it)."""
    user = DashboardUser("ana", hash_password("correct horse", n=settings.dashboard.password_scrypt_n), sites)
    write_file_users(settings, [user])
    sessions = Sessions(settings)
    BROWSER["cookie"] = sessions.cookie_value(sessions.create(user, now=time.time()))
    return AppTest.from_file(APP, default_timeout=60)
