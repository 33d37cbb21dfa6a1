"""The data-health panel shows each page's own site only; whole-instance figures only to viewers of every site.

The warehouse holds, besides site A's own audit, figures a viewer of site A must not see: an
all-site audit (page views of the whole instance), site B's own audit, site B's quarantine,
late events and archive lag (counted over every site) and the quality suites' results (every
site's rows). Each carries a marker number or name; the page is driven with Streamlit's AppTest.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pyarrow as pa
import pytest
from streamlit.testing.v1 import AppTest

import dashboard.health
import dashboard.login
from dashboard.auth import load_users, write_file_users
from dashboard.health import ArchiveLag
from dashboard.sessions import Sessions
from dashboard.share_links import ShareLinks
from tally.quarantine import PartitionStatus
from tally.settings import DashboardUser, Settings
from tally.storage import append_rows
from tally.table_schemas import QUALITY_AUDITS_SCHEMA, QUALITY_PARTITIONS_SCHEMA, QUALITY_RESULTS_SCHEMA, RAW_LAYOUT
from tally.tables import LATE_EVENTS, QUALITY_AUDITS, QUALITY_PARTITIONS, QUALITY_RESULTS, RAW_PAGEVIEWS
from tests.unit import markup_reader

APP = str(Path(__file__).parents[2] / "dashboard" / "app.py")
SITE_A, SITE_B = "demo.tally.local", "limited.tally.test"  # the sites of conf/test.yaml
NOW = dt.datetime.now(dt.UTC)
A_BOTS = 7  # site A's events from bots and monitors today
TODAY = NOW.date()

A_AUDIT = 1234  # site A's own audit: its page shows it
ALL_SITE_AUDIT = 987654  # the nightly all-site audit: page views of the whole instance
B_AUDIT = 777777  # site B's own audit
LATE = 31337  # late events of every site
LAG = 424242  # archive lag of every site
CHECK = "suite-check-over-every-site"
WHOLE_INSTANCE = ("987,654", "987654", "31,337", "31337", "424,242", "424242", CHECK)
SITE_B_ONLY = ("777,777", "777777", SITE_B)


def _audit_row(run: str, site: str | None, at: dt.datetime, figure: int) -> dict[str, object]:
    return {
        "run_id": run,
        "audited_at": at,
        "date_from": TODAY,
        "date_to": TODAY,
        "site_id": site,
        "check": "raw=views",
        "subject": "agg.traffic_1d",
        "partition_date": TODAY,
        "expected": figure,
        "actual": figure,
        "success": True,
        "message": f"page views: {figure:,} in agg.traffic_1d, raw.pageviews: {figure:,}",
        "hint": None,
    }


def seed_warehouse(settings: Settings) -> None:
    """Site A's audit (oldest), site B's, then the all-site one (newest); and the whole-instance figures."""
    audits = [
        _audit_row("run-a", SITE_A, NOW - dt.timedelta(hours=3), A_AUDIT),
        _audit_row("run-b", SITE_B, NOW - dt.timedelta(hours=2), B_AUDIT),
        _audit_row("run-all", None, NOW - dt.timedelta(hours=1), ALL_SITE_AUDIT),
    ]
    append_rows(settings, QUALITY_AUDITS, pa.Table.from_pylist(audits, schema=QUALITY_AUDITS_SCHEMA))
    result = {
        "run_id": "suite-1",
        "checked_at": NOW,
        "table_name": "agg.traffic_1d",
        "partition_date": TODAY,
        "suite": "views",
        "check": CHECK,
        "expectation": "expect_column_values_to_not_be_null",
        "column": "pageviews",
        "success": True,
        "unexpected_count": 0,
        "observed": "{}",
    }
    append_rows(settings, QUALITY_RESULTS, pa.Table.from_pylist([result], schema=QUALITY_RESULTS_SCHEMA))
    late_schema = pa.schema(
        [
            ("query", pa.string()),
            ("batch_id", pa.int64()),
            ("recorded_at", pa.timestamp("us", tz="UTC")),
            ("watermark", pa.timestamp("us", tz="UTC")),
            ("late_rows", pa.int64()),
            ("event_date", pa.date32()),
        ]
    )
    late = {"query": "traffic", "batch_id": 1, "recorded_at": NOW, "watermark": NOW, "late_rows": LATE}
    append_rows(
        settings,
        LATE_EVENTS.table,
        pa.Table.from_pylist([late | {"event_date": TODAY}], schema=late_schema),
        partition_by=["event_date"],
    )
    b_quarantine = PartitionStatus("agg.traffic_1d", TODAY, f"audit:{SITE_B}", True, "run-b", NOW, ("raw=views",))
    partitions = [
        {
            "table_name": b_quarantine.table,
            "partition_date": b_quarantine.partition_date,
            "checker": b_quarantine.checker,
            "quarantined": True,
            "run_id": b_quarantine.run_id,
            "checked_at": NOW,
            "failed_checks": "raw=views: page views",
        }
    ]
    append_rows(settings, QUALITY_PARTITIONS, pa.Table.from_pylist(partitions, schema=QUALITY_PARTITIONS_SCHEMA))
    # Site A's bots and monitors (left out of every figure, counted on its panel), a person, and B's bot.
    visits = [(SITE_A, True)] * A_BOTS + [(SITE_A, False), (SITE_B, True)]
    events = [
        {"event_id": f"e{i}", "site_id": site, "is_bot": bot, "type": "pageview", "event_date": TODAY}
        for i, (site, bot) in enumerate(visits)
    ]
    schema, partition_by = RAW_LAYOUT[RAW_PAGEVIEWS]
    append_rows(settings, RAW_PAGEVIEWS, pa.Table.from_pylist(events, schema=schema), partition_by=[partition_by])


@pytest.fixture(autouse=True)
def seeded(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's home with the warehouse above; the archive lag without a broker."""
    monkeypatch.setattr(dashboard.health, "archive_lag_total", lambda settings, **_: ArchiveLag(LAG))
    seed_warehouse(settings)


def add_users(settings: Settings) -> None:
    """``ana`` may see site A only, ``root`` every site (a session needs no real hash: it is never checked)."""
    write_file_users(
        settings, [DashboardUser("ana", "not-checked-here", (SITE_A,)), DashboardUser("root", "not-checked", ("*",))]
    )


def shown(app: AppTest) -> str:
    """Every text, figure and table cell the page shows, main area and sidebar."""
    parts: list[str] = []
    for kind in ("title", "header", "subheader", "markdown", "caption", "text", "code", "info", "warning", "error"):
        parts += [str(element.value) for element in getattr(app, kind)]
    parts += [f"{m.label} {m.value}" for m in app.metric]
    parts += [frame.value.to_csv() for frame in app.dataframe]
    drawn = [f"{label} {value}" for label, value in markup_reader.cards(app).items()]
    drawn += [frame.to_csv() for frame in markup_reader.tables(app).values()]
    drawn.append(markup_reader.text(app))
    parts += drawn + [part.replace(",", "") for part in drawn]  # 1,234 as drawn, and as the figure 1234
    return "\n".join(parts)


def share_link_page(settings: Settings) -> AppTest:
    add_users(settings)
    _, token = ShareLinks(settings).create(site=SITE_A, view={}, days=1, creator="ana", now=time.time())
    app = AppTest.from_file(APP, default_timeout=60)
    app.query_params["share"] = token
    return app.run()


def user_page(settings: Settings, name: str, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    """Site A's page for a logged-in user (a session as the login form leaves it)."""
    add_users(settings)
    app = AppTest.from_file(APP, default_timeout=60)
    sessions = Sessions(settings)
    cookie = sessions.cookie_value(sessions.create(load_users(settings)[name], now=time.time()))
    monkeypatch.setattr(dashboard.login, "session_cookie", lambda: cookie)
    app.query_params["site"] = SITE_A
    return app.run()


def test_a_share_link_for_site_a_shows_nothing_derived_from_site_b_or_the_whole_instance(settings: Settings) -> None:
    app = share_link_page(settings)
    assert not app.exception and not app.error
    page = shown(app)
    assert "Data health" in page and f"Tally · {SITE_A}" in page
    leaked = [marker for marker in (*WHOLE_INSTANCE, *SITE_B_ONLY) if marker in page]
    assert leaked == [], f"a share link of {SITE_A} shows {leaked}"
    assert str(A_AUDIT) in page, "the site's own audit is shown"


def test_a_user_granted_one_site_sees_that_sites_health_only(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    app = user_page(settings, "ana", monkeypatch)
    assert not app.exception and not app.error
    page = shown(app)
    leaked = [marker for marker in (*WHOLE_INSTANCE, *SITE_B_ONLY) if marker in page]
    assert leaked == [], f"a user of {SITE_A} only sees {leaked}"
    assert str(A_AUDIT) in page


def test_a_user_granted_every_site_sees_the_whole_instance_but_not_another_sites_own_audit(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = shown(user_page(settings, "root", monkeypatch))
    assert all(marker in page for marker in ("424,242", "31,337", "987654", CHECK)), "whole-instance health"
    assert not any(marker in page for marker in SITE_B_ONLY), "site B's own audit and quarantine are B's page's"


def test_a_site_s_bots_and_monitors_are_counted_on_its_panel_and_nowhere_else(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = shown(user_page(settings, "ana", monkeypatch))
    assert f"Bots and monitors in range {A_BOTS}" in page  # site B's bot is not site A's
