"""Report and alert messages as people read them, and the notify settings."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from notify.channels import WebhookChannel
from notify.digest import Digest, Figures, TopRow, change
from notify.health import Health
from notify.messages import alert_message, report_message
from notify.rules import Finding
from ops.cli import build_parser
from query.aggregates import Range
from tally.settings import SettingsError, load_settings

HEALTHY = Health(dt.timedelta(0), dt.timedelta(seconds=3), (), dt.timedelta(minutes=10))


def digest(health: Health = HEALTHY) -> Digest:
    return Digest(
        site="a.example",
        period="weekly",
        days=Range(dt.date(2026, 3, 2), dt.date(2026, 3, 8)),
        previous=Range(dt.date(2026, 2, 23), dt.date(2026, 3, 1)),
        current=Figures(1234.4, 0.016, 5000, 1500, 0.42, 95.0),
        before=Figures(1000.0, 0.016, 4000, 1500, 0.5, None),
        top_pages=(TopRow("/", 3000, 900), TopRow("/pricing", 800, 300)),
        top_sources=(),
        health=health,
    )


def test_the_change_is_the_dashboards_relative_change_and_none_without_a_previous_figure() -> None:
    assert change(150, 100) == 0.5
    assert change(5, 0) is None and change(None, 3) is None and change(3, None) is None


def test_a_report_shows_every_kpi_with_its_change_the_top_tables_and_the_health() -> None:
    message = report_message(digest())
    assert message.key == "report:a.example:weekly:2026-03-02"
    assert message.subject == "Tally weekly report: a.example, 2026-03-02 – 2026-03-08"
    lines = message.text.splitlines()
    for expected in (
        "Unique visitors: ≈ 1,234 ± 1.6% (+23.4%)",
        "Page views: 5,000 (+25.0%)",
        "Visits: 1,500 (+0.0%)",
        "Bounce rate: 42% (-16.0%)",
        "Visit duration: 1m 35s (no previous figure)",
        "     3,000  /",
        "Top sources (page views): none in this period",
        "  status: ok",
    ):
        assert expected in lines, f"{expected!r} not in:\n{message.text}"
    assert message.data["figures"]["pageviews"] == 5000 and message.data["change"]["pageviews"] == 0.25


def test_a_report_names_what_needs_attention() -> None:
    unhealthy = Health(dt.timedelta(minutes=30), None, ("agg.traffic_1d 2026-03-04 (suite)",), dt.timedelta(minutes=10))
    text = report_message(digest(unhealthy)).text
    assert "  status: attention" in text and "archive lag: unknown" in text
    assert "attention: the views are 30 min behind the archived events" in text
    assert "agg.traffic_1d 2026-03-04" in text


def test_an_alert_and_its_recovery_are_keyed_by_the_incident() -> None:
    finding = Finding("tracking_stopped", "a.example", True, "no page view since 09:00")
    alert = alert_message(finding, "2026-03-09T10:05:00+00:00", recovery=False)
    over = alert_message(finding, "2026-03-09T10:05:00+00:00", recovery=True)
    assert alert.key == "alert:a.example:tracking_stopped:2026-03-09T10:05:00+00:00"
    assert over.key.startswith("recovery:") and alert.subject == "Tally alert: tracking stopped on a.example"
    assert over.subject == "Tally resolved: tracking stopped on a.example"


def test_a_webhook_is_named_in_the_ledger_without_its_secret_path() -> None:
    name = WebhookChannel("https://hooks.slack.com/services/T000/B000/SECRET").recipient
    assert name.startswith("webhook:hooks.slack.com:") and "SECRET" not in name


def write_conf(tmp_path: Path, notify: str) -> Path:
    (tmp_path / "tally.yaml").write_text("sites:\n  - site_id: a.example\nnotify:\n" + notify)
    return tmp_path


def test_notify_is_off_by_default_and_reads_reports_and_alerts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TALLY_ENV", raising=False)
    assert load_settings(write_conf(tmp_path, "  attempts: 3\n")).notify.reports == ()
    conf = (
        "  smtp: {host: mail.example.org, sender: tally@example.org, tls: ssl, port: 465}\n"
        "  reports:\n    - {site: a.example, period: monthly, emails: [ann@example.org]}\n"
        "  alerts: {webhooks: ['https://hooks.example.org/x'], quiet_minutes: 30}\n"
    )
    notify = load_settings(write_conf(tmp_path, conf)).notify
    assert notify.smtp.tls == "ssl" and notify.reports[0].period == "monthly"
    assert notify.alerts.quiet_minutes == 30


@pytest.mark.parametrize(
    ("conf", "named"),
    [
        ("  smtp: {tls: maybe}\n", "notify.smtp.tls"),
        ("  reports:\n    - {site: a.example, period: daily, emails: [a@b]}\n", "period"),
        ("  reports:\n    - {site: a.example}\n", "at least one of emails or webhooks"),
        ("  reports:\n    - {site: a.example, emails: [a@b]}\n", "notify.smtp.host"),
        ("  alerts: {webhooks: ['ftp://x']}\n", "notify.alerts.webhooks"),
        ("  alerts: {usual_min_days: 40}\n", "notify.alerts.usual_min_days"),
    ],
)
def test_a_bad_notify_value_names_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, conf: str, named: str
) -> None:
    monkeypatch.delenv("TALLY_ENV", raising=False)
    with pytest.raises(SettingsError, match=named):
        load_settings(write_conf(tmp_path, conf))


def test_the_report_and_alerts_commands_have_help_and_a_dry_run(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["report", "send", "--help"], ["alerts", "check", "--help"], ["alerts", "status", "--help"]):
        with pytest.raises(SystemExit) as done:
            build_parser().parse_args(argv)
        assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.count("print the messages; send and record nothing") == 2 and "failed." in out
