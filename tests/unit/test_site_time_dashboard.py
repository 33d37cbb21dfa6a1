"""The dashboard counts a site's days in its own time zone and says so (labels, chart axis)."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

import dashboard.login
from dashboard.auth import write_file_users
from dashboard.passwords import hash_password
from dashboard.series_chart import wall_clock
from dashboard.sessions import Sessions
from dashboard.view import range_label
from tally.settings import DashboardUser, Settings

APP = str(Path(__file__).parents[2] / "dashboard" / "app.py")
SITE = "kolkata.tally.test"


def test_a_range_label_names_the_zone_its_days_are_counted_in() -> None:
    assert range_label("today", "Asia/Kolkata") == "Today (Asia/Kolkata)"
    assert range_label("7d", "America/New_York") == "Last 7 days (America/New_York)"


def test_the_charts_times_are_the_sites_wall_clock_whatever_the_browsers_zone() -> None:
    utc = pd.Series(pd.to_datetime(["2026-03-08 04:00", "2026-03-08 07:00"], utc=True))
    local = wall_clock(utc, "America/New_York")  # DST starts at 07:00 UTC that day
    assert list(local) == [pd.Timestamp("2026-03-07 23:00"), pd.Timestamp("2026-03-08 03:00")]
    assert list(wall_clock(local, "America/New_York")) == list(local)  # already wall clock: kept


@pytest.fixture(autouse=True)
def kolkata(monkeypatch: pytest.MonkeyPatch) -> None:
    """One site, in Asia/Kolkata (`settings` reads it)."""
    monkeypatch.setenv("TALLY_SITES", f'[{{"site_id": "{SITE}", "domains": ["{SITE}"], "timezone": "Asia/Kolkata"}}]')


@pytest.fixture(autouse=True)
def logged_in(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user granted every site, logged in: the page reads the session's cookie."""
    user = DashboardUser("ana", hash_password("correct horse", n=settings.dashboard.password_scrypt_n), ("*",))
    write_file_users(settings, [user])
    sessions = Sessions(settings)
    cookie = sessions.cookie_value(sessions.create(user, now=time.time()))
    monkeypatch.setattr(dashboard.login, "session_cookie", lambda: cookie)


def test_a_site_in_kolkata_shows_its_ranges_in_its_zone(settings: Settings) -> None:
    app = AppTest.from_file(APP, default_timeout=60)
    app.query_params["range"] = "today"
    app.run()
    assert not app.exception
    assert any(c.value.startswith("Today (Asia/Kolkata) · bots excluded") for c in app.caption)
    assert any(c.value.endswith("(Asia/Kolkata).") and c.value.startswith("Figures as of") for c in app.caption)
    picker = app.sidebar.selectbox(key="range")
    assert picker.format_func("30d") == "Last 30 days (Asia/Kolkata)"
