"""The delivery ledger: never sent twice, even across a restart; retried, then recorded as failed."""

from __future__ import annotations

import datetime as dt
import stat
from pathlib import Path

from notify.alerts import check
from notify.channels import DeliveryError
from notify.ledger import Ledger, deliver, open_ledger
from notify.messages import Message
from notify.rules import Finding
from tally.settings import AlertRuleSettings, NotifySettings, Settings

NOW = dt.datetime(2026, 3, 9, 7, 0, tzinfo=dt.UTC)
MESSAGE = Message("report:a:weekly:2026-03-02", "subject", ("text",), {"figures": {"pageviews": 3}})


class FakeChannel:
    """A recipient that fails ``failures`` times, then takes every message."""

    def __init__(self, recipient: str, failures: int = 0) -> None:
        self.recipient, self.failures = recipient, failures
        self.received: list[Message] = []
        self.tries = 0

    def send(self, message: Message) -> None:
        self.tries += 1
        if self.tries <= self.failures:
            raise DeliveryError("connection refused")
        self.received.append(message)


def settings_for(home: Path, **alerts: object) -> Settings:
    rules = AlertRuleSettings(webhooks=("http://127.0.0.1:1/hook",), **alerts)  # type: ignore[arg-type]
    return Settings(home=str(home), notify=NotifySettings(attempts=3, retry_seconds=0.5, alerts=rules))


def test_a_message_delivered_before_a_restart_is_not_sent_again(tmp_path: Path) -> None:
    channel = FakeChannel("mailto:ann@example.org")
    with open_ledger(tmp_path) as ledger:
        [first] = deliver(ledger, MESSAGE, [channel], attempts=3, retry_seconds=0, clock=lambda: NOW)
    assert first.status == "sent" and len(channel.received) == 1
    with open_ledger(tmp_path) as reopened:  # a new process reads the file
        assert deliver(reopened, MESSAGE, [channel], attempts=3, retry_seconds=0) == []
    assert len(channel.received) == 1


def test_the_ledger_is_private_and_written_whole(tmp_path: Path) -> None:
    with open_ledger(tmp_path) as ledger:
        deliver(ledger, MESSAGE, [FakeChannel("mailto:a@b")], attempts=1, retry_seconds=0, clock=lambda: NOW)
    path = tmp_path / "notify" / "ledger.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".ledger")] == []  # no temp file left


def test_a_failed_delivery_is_retried_with_backoff_then_recorded_as_failed(tmp_path: Path) -> None:
    waits: list[float] = []
    broken, fine = FakeChannel("mailto:down@example.org", failures=99), FakeChannel("mailto:up@example.org")
    with open_ledger(tmp_path) as ledger:
        outcomes = deliver(ledger, MESSAGE, [broken, fine], attempts=3, retry_seconds=2, sleep=waits.append)
    assert [(o.recipient, o.status, o.attempts) for o in outcomes] == [
        ("mailto:down@example.org", "failed", 3),
        ("mailto:up@example.org", "sent", 1),
    ]
    assert waits == [2, 4] and "connection refused" in outcomes[0].error
    failed = [d for d in Ledger(tmp_path / "notify" / "ledger.json").deliveries() if d.status == "failed"]
    assert [d.recipient for d in failed] == ["mailto:down@example.org"]


def test_a_failure_then_success_within_the_retries_is_sent_once(tmp_path: Path) -> None:
    flaky = FakeChannel("mailto:a@b", failures=1)
    with open_ledger(tmp_path) as ledger:
        [outcome] = deliver(ledger, MESSAGE, [flaky], attempts=3, retry_seconds=0, sleep=lambda s: None)
    assert (outcome.status, outcome.attempts, len(flaky.received)) == ("sent", 2, 1)


def test_a_failed_delivery_is_tried_again_by_the_next_run_and_then_not_again(tmp_path: Path) -> None:
    channel = FakeChannel("mailto:a@b", failures=2)
    with open_ledger(tmp_path) as ledger:
        [outcome] = deliver(ledger, MESSAGE, [channel], attempts=2, retry_seconds=0, sleep=lambda s: None)
    assert outcome.status == "failed"
    for _ in range(2):
        with open_ledger(tmp_path) as ledger:
            deliver(ledger, MESSAGE, [channel], attempts=2, retry_seconds=0, sleep=lambda s: None)
    assert len(channel.received) == 1


def test_an_alert_sends_once_per_incident_across_restarts_and_a_recovery_when_it_clears(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    channel = FakeChannel("webhook:x")
    firing = [Finding("views_lag", "a", True, "the views are 20 min behind")]
    for minute in (0, 5, 10):  # three checks, each a fresh process reading the ledger
        with open_ledger(tmp_path) as ledger:
            check(ledger, firing, [channel], now=NOW + dt.timedelta(minutes=minute), settings=settings)
    with open_ledger(tmp_path) as ledger:
        check(
            ledger, [Finding("views_lag", "a", False)], [channel], now=NOW + dt.timedelta(minutes=15), settings=settings
        )
    assert [m.subject for m in channel.received] == [
        "Tally alert: views lag on a",
        "Tally resolved: views lag on a",
    ]
    assert channel.received[1].data["summary"] == "the views are 20 min behind"


def test_an_alert_decided_by_a_run_that_died_is_sent_by_the_next_one(tmp_path: Path) -> None:
    settings = settings_for(tmp_path)
    firing = [Finding("quarantine", "a", True, "1 quarantined partition")]

    class Dying(FakeChannel):
        def send(self, message: Message) -> None:
            raise KeyboardInterrupt  # the process is stopped mid-delivery

    try:
        with open_ledger(tmp_path) as ledger:
            check(ledger, firing, [Dying("webhook:x")], now=NOW, settings=settings)
    except KeyboardInterrupt:
        pass
    channel = FakeChannel("webhook:x")
    with open_ledger(tmp_path) as ledger:
        check(ledger, firing, [channel], now=NOW + dt.timedelta(minutes=5), settings=settings)
    with open_ledger(tmp_path) as ledger:
        check(ledger, firing, [channel], now=NOW + dt.timedelta(minutes=10), settings=settings)
    assert [m.subject for m in channel.received] == ["Tally alert: quarantined partition on a"]
