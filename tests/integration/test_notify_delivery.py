"""Reports and alerts delivered to a real SMTP server (aiosmtpd) and a real local HTTP receiver.

Raw events go into raw.pageviews and a real Spark backfill computes the views (a copy of the
session's shared ``march`` warehouse); the weekly report's figures must equal those the dashboard
reads through the query layer, be sent once (not again on a second run, nor after a restart), and
a stopped SMTP server must be retried, then recorded as failed.
Each alert condition is injected and delivered once within the quiet period.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import email
import email.policy
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from aiosmtpd.controller import Controller

from notify.alerts import Instance, check, findings
from notify.channels import channels
from notify.ledger import deliver, open_ledger
from notify.observe import DeadLetterFigures, site_figures
from notify.reports import due_reports, send
from ops.stack import free_ports
from query.aggregates import Aggregates, Range
from query.freshness import views_lag
from query.sources import Sources
from simulator.synthetic import synthetic_events
from tally.settings import AlertRuleSettings, NotifySettings, ReportSubscription, Settings, SmtpSettings
from tally.storage import append_rows
from tally.table_schemas import QUALITY_PARTITIONS_SCHEMA
from tally.tables import QUALITY_PARTITIONS
from tests.integration.views_support import MARCH_SITE, copy_warehouse, write_raw
from tests.unit.test_notify_escaping import hostile_report

SITE = MARCH_SITE
LIMIT = dt.timedelta(minutes=10)  # alerts.lag_minutes
NOW = dt.datetime(2026, 3, 9, 7, 0, tzinfo=dt.UTC)  # a Monday: the week of 2 to 8 March is due
WEEK, PREVIOUS = Range(dt.date(2026, 3, 2), dt.date(2026, 3, 8)), Range(dt.date(2026, 2, 23), dt.date(2026, 3, 1))
RULES = {
    "traffic_threshold",
    "traffic_unusual",
    "tracking_stopped",
    "deadletter_surge",
    "archive_lag",
    "views_lag",
    "quarantine",
}


class Mailbox:
    """aiosmtpd's handler: every message the server accepted."""

    def __init__(self) -> None:
        self.messages: list[email.message.EmailMessage] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(email.message_from_bytes(envelope.content, policy=email.policy.default))  # type: ignore[arg-type]
        return "250 Message accepted for delivery"


class Receiver(ThreadingHTTPServer):
    """A webhook endpoint on 127.0.0.1: keeps every JSON body; answers 500 while ``failing``."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.failing = False
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if not receiver.failing:
                    receiver.bodies.append(body)
                self.send_response(500 if receiver.failing else 200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, Any]]:
    mailbox = Mailbox()
    smtp = Controller(mailbox, hostname="127.0.0.1", port=free_ports(1)[0])
    smtp.start()
    receiver = Receiver()
    thread = threading.Thread(target=receiver.serve_forever, daemon=True)
    thread.start()
    try:
        yield {"mailbox": mailbox, "smtp_port": smtp.port, "receiver": receiver}
    finally:
        smtp.stop()
        receiver.shutdown()
        receiver.server_close()


def notify_settings(base: Settings, home: Path, smtp_port: int, hook: str) -> Settings:
    smtp = SmtpSettings(host="127.0.0.1", port=smtp_port, sender="tally@example.org", tls="none", timeout_seconds=5)
    return dataclasses.replace(
        base,
        home=str(home),
        warehouse=dataclasses.replace(base.warehouse, path=str(home / "warehouse")),
        notify=NotifySettings(
            smtp=smtp,
            attempts=2,
            retry_seconds=0.05,
            reports=(ReportSubscription(SITE, "weekly", emails=("ann@example.org",), webhooks=(hook,)),),
            alerts=AlertRuleSettings(
                emails=("ops@example.org",), webhooks=(hook,), pageviews_per_hour_above=1000, quiet_minutes=60
            ),
        ),
    )


@pytest.fixture(scope="module")
def warehouse(
    settings: Settings, march: Settings, servers: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Settings:
    home = tmp_path_factory.mktemp("notify")
    hook = f"http://127.0.0.1:{servers['receiver'].server_port}/hook"
    # A copy of the session's shared backfilled tables, since the alert test writes to them. Its
    # four days are in both periods (1 March in the previous week, 2-4 in the reported one), so
    # both have figures to compare.
    copy_warehouse(march, home)
    return notify_settings(settings, home, servers["smtp_port"], hook)


def body_line(text: str, label: str) -> str:
    [line] = [line for line in text.splitlines() if line.startswith(label + ": ")]
    return line.removeprefix(label + ": ")


def test_the_weekly_report_carries_the_dashboards_figures_and_is_sent_once(
    warehouse: Settings, servers: dict[str, Any]
) -> None:
    mailbox, receiver = servers["mailbox"], servers["receiver"]
    due = due_reports(warehouse, Sources(warehouse), NOW, lambda: None)
    with open_ledger(warehouse.home_dir) as ledger:
        outcomes = send(ledger, due, warehouse)
    assert [o.status for o in outcomes] == ["sent", "sent"]

    # The dashboard's figures, read through the query layer as its page reads them.
    agg = Aggregates(warehouse)
    report = Sources(warehouse, agg).aggregate_report(SITE, WEEK.start, WEEK.end)
    now, before = report.totals(), Sources(warehouse, agg).aggregate_report(SITE, *vars(PREVIOUS).values()).totals()
    assert now.pageviews > 0 and before.pageviews > 0

    [mail] = mailbox.messages
    assert mail["To"] == "ann@example.org" and mail["Subject"].endswith("2026-03-02 – 2026-03-08")
    text = mail.get_content()
    change = (now.pageviews - before.pageviews) / before.pageviews
    assert body_line(text, "Page views") == f"{now.pageviews:,} ({change:+.1%})"
    assert body_line(text, "Visits").startswith(f"{now.visits:,} (")
    assert body_line(text, "Unique visitors").startswith(f"≈ {now.visitors.value:,.0f} ± ")
    assert body_line(text, "Bounce rate").startswith(f"{now.bounce_rate:.0%} (")

    [hook] = receiver.bodies
    data = hook["tally"]
    assert hook["text"].startswith("*Tally weekly report: demo.tally.local")
    assert data["figures"] == {
        "visitors": now.visitors.value,
        "pageviews": now.pageviews,
        "visits": now.visits,
        "bounce_rate": now.bounce_rate,
        "visit_duration_s": now.avg_duration_s,
    }
    assert data["previous"]["pageviews"] == before.pageviews and data["change"]["pageviews"] == change
    top = report.top("page", limit=5)
    assert [(r["value"], r["pageviews"]) for r in data["top_pages"]] == list(
        zip(top["value"], top["pageviews"], strict=True)
    )
    assert [r["value"] for r in data["top_sources"]] == list(report.top("source", limit=5)["value"])
    assert data["health"]["status"] in ("ok", "attention")

    for _ in range(2):  # a second run, and one more as after a restart: nothing is sent again
        with open_ledger(warehouse.home_dir) as ledger:
            assert send(ledger, due_reports(warehouse, Sources(warehouse), NOW, lambda: None), warehouse) == []
    assert len(mailbox.messages) == 1 and len(receiver.bodies) == 1


def test_a_stopped_smtp_server_is_retried_then_recorded_as_failed(
    warehouse: Settings, servers: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    from ops.notify_commands import run_alerts_status

    gone = Controller(servers["mailbox"], hostname="127.0.0.1", port=free_ports(1)[0])
    gone.start()
    gone.stop()  # its port now refuses connections
    stopped = dataclasses.replace(
        warehouse,
        notify=dataclasses.replace(
            warehouse.notify,
            smtp=SmtpSettings(
                host="127.0.0.1", port=gone.port, sender="tally@example.org", tls="none", timeout_seconds=5
            ),
        ),
    )
    next_week = NOW + dt.timedelta(days=7)
    due = due_reports(stopped, Sources(stopped), next_week, lambda: None)
    with open_ledger(stopped.home_dir) as ledger:
        outcomes = send(ledger, due, stopped)
    by_recipient = {o.recipient.partition(":")[0]: o for o in outcomes}
    assert by_recipient["mailto"].status == "failed" and by_recipient["mailto"].attempts == 2
    assert "Connection refused" in by_recipient["mailto"].error or "refused" in by_recipient["mailto"].error.lower()
    assert by_recipient["webhook"].status == "sent"
    assert run_alerts_status(None, stopped) == 1  # type: ignore[arg-type]
    assert "report:demo.tally.local:weekly:2026-03-09  mailto:ann@example.org  after 2 tries" in capsys.readouterr().out


def test_each_alert_condition_is_delivered_once_within_the_quiet_period(
    warehouse: Settings, servers: dict[str, Any]
) -> None:
    mailbox, receiver = servers["mailbox"], servers["receiver"]
    mails, hooks = len(mailbox.messages), len(receiver.bodies)
    # Real conditions in the tables: a quarantined partition, and an event newer than the views.
    quarantine = {"table_name": "agg.traffic_1d", "partition_date": WEEK.end, "checker": "suite", "quarantined": True}
    row = {**quarantine, "run_id": "r1", "checked_at": NOW, "failed_checks": "pageviews >= 0"}
    append_rows(warehouse, QUALITY_PARTITIONS, pa.Table.from_pylist([row], schema=QUALITY_PARTITIONS_SCHEMA))
    late = synthetic_events(visits=3, start=NOW - dt.timedelta(minutes=3), span=dt.timedelta(minutes=1), site_id=SITE)
    write_raw(
        warehouse, late.set_column(late.schema.get_field_index("is_bot"), "is_bot", pa.array([False] * late.num_rows))
    )

    rules = warehouse.notify.alerts
    observed = site_figures(warehouse, Aggregates(warehouse), SITE, NOW, rules)
    assert observed.quarantined and views_lag(observed.newest_event, observed.newest_window, NOW.date()) > LIMIT
    # Injected figures for the rest: a traffic spike far above a steady usual level, and silence since.
    spike = dataclasses.replace(
        observed,
        hour_pageviews=5000,
        hour_history=(100,) * 10,
        newest_event=NOW - dt.timedelta(hours=2),
        newest_window=NOW - dt.timedelta(hours=3),
        now_history=(100,) * 10,
    )
    surge = Instance(DeadLetterFigures(recent=500, baseline=2.0), archive_lag=dt.timedelta(minutes=45))
    targets = channels(warehouse.notify.smtp, rules.emails, rules.webhooks)

    def run(minutes: int, figures: Any, instance: Instance) -> None:
        with open_ledger(warehouse.home_dir) as ledger:
            check(
                ledger,
                findings(warehouse, [figures], instance),
                targets,
                now=NOW + dt.timedelta(minutes=minutes),
                settings=warehouse,
            )

    run(0, spike, surge)
    run(5, spike, surge)  # the same incidents five minutes later: nothing more
    new_hooks = receiver.bodies[hooks:]
    assert sorted(b["tally"]["rule"] for b in new_hooks) == sorted(RULES)
    assert all(b["tally"]["kind"] == "alert" for b in new_hooks)
    assert len(mailbox.messages) - mails == len(RULES)
    assert {m["To"] for m in mailbox.messages[mails:]} == {"ops@example.org"}

    calm = dataclasses.replace(
        spike,
        hour_pageviews=100,
        quarantined=(),
        newest_event=NOW + dt.timedelta(minutes=9),
        newest_window=NOW + dt.timedelta(minutes=9),
    )
    run(10, calm, Instance(DeadLetterFigures(0, 2.0), dt.timedelta(0)))
    recoveries = receiver.bodies[hooks + len(RULES) :]
    assert sorted(b["tally"]["rule"] for b in recoveries) == sorted(RULES)
    assert all(b["tally"]["kind"] == "recovery" for b in recoveries)


def test_hostile_visitor_values_reach_the_smtp_server_and_the_webhook_as_words(
    servers: dict[str, Any], tmp_path: Path
) -> None:
    mailbox, receiver = servers["mailbox"], servers["receiver"]
    mails, hooks = len(mailbox.messages), len(receiver.bodies)
    smtp = SmtpSettings(host="127.0.0.1", port=servers["smtp_port"], sender="tally@example.org", tls="none")
    hook = f"http://127.0.0.1:{receiver.server_port}/hook"
    with open_ledger(tmp_path) as ledger:
        outcomes = deliver(
            ledger, hostile_report(), channels(smtp, ("ann@example.org",), (hook,)), attempts=1, retry_seconds=0
        )
    assert [o.status for o in outcomes] == ["sent", "sent"]

    [mail] = mailbox.messages[mails:]
    assert mail.get_content_type() == "text/plain" and not mail.is_multipart()
    assert mail.get_content().splitlines().count("  status: ok") == 1  # no line forged by a page path
    [body] = receiver.bodies[hooks:]
    assert "<" not in body["text"] and "@everyone" not in body["text"] and "](" not in body["text"]
    assert "<!channel>" in body["tally"]["top_sources"][0]["value"]  # the data keeps what was sent
