"""Visitor values in a report (page paths, sources) reach every channel as words, never as its markup."""

from __future__ import annotations

import dataclasses
import email
import email.policy
import json
import smtplib
from collections.abc import Callable
from email.message import EmailMessage
from typing import Any

import httpx
import pytest

from notify.channels import EmailChannel, WebhookChannel
from notify.digest import TopRow
from notify.escaping import REPLACEMENT, ZERO_WIDTH_SPACE, plain_text, slack_text
from notify.messages import Message, report_message
from tally.settings import SmtpSettings
from tests.unit.test_notify_messages import digest

SLACK_PHISH = "<!channel> <https://evil.example/login|Tally session expired, log in again>"
HOSTILE_PAGES = (
    TopRow("/pricing\nData health:\n  status: ok", 900, 300),  # forges lines of Tally's own
    TopRow("<script>alert(1)</script>", 800, 200),
    TopRow("[Log in again](https://evil.example/login)", 700, 100),
    TopRow("/\x1b[2J\x1b]8;;https://evil.example\x1b\\docs\x1b]8;;\x1b\\", 600, 90),  # clears a terminal, hides a link
)
HOSTILE_SOURCES = (
    TopRow(SLACK_PHISH, 500, 80),
    TopRow("<@U024BE7LH> <#C024BE7LR> &amp;", 400, 70),
    TopRow("@everyone @here @channel @all", 300, 60),
    TopRow("evil\u202eelpmaxe.com", 200, 50),  # a right-to-left override: reads as evil.example.com
)
BENIGN_PAGES = (TopRow("/", 3000, 900), TopRow("/pricing?utm_source=news", 800, 300))
BENIGN_SOURCES = (TopRow("google.com", 1200, 400), TopRow("Direct / None", 600, 200))


def report_of(pages: tuple[TopRow, ...], sources: tuple[TopRow, ...]) -> Message:
    return report_message(dataclasses.replace(digest(), top_pages=pages, top_sources=sources))


def hostile_report() -> Message:
    return report_of(HOSTILE_PAGES, HOSTILE_SOURCES)


def tame(rows: tuple[TopRow, ...]) -> tuple[TopRow, ...]:
    """The same rows with a harmless value each."""
    return tuple(dataclasses.replace(r, value="/") for r in rows)


@pytest.fixture
def webhook(monkeypatch: pytest.MonkeyPatch) -> Callable[[Message], dict[str, Any]]:
    """Sends a message to a webhook; returns the JSON body as the receiver reads it."""
    bodies: list[dict[str, Any]] = []

    def post(url: str, **request: Any) -> httpx.Response:
        bodies.append(request["json"])
        return httpx.Response(200)

    monkeypatch.setattr(httpx, "post", post)

    def send(message: Message) -> dict[str, Any]:
        WebhookChannel("https://hooks.slack.com/services/T000/B000/SECRET").send(message)
        received: dict[str, Any] = json.loads(json.dumps(bodies.pop()))
        return received

    return send


@pytest.fixture
def mail(monkeypatch: pytest.MonkeyPatch) -> Callable[[Message], EmailMessage]:
    """Sends a message by e-mail; returns the mail as the server receives it."""
    outbox: list[bytes] = []

    class Server:
        def __init__(self, host: str, port: int, *, timeout: float) -> None:
            pass

        def __enter__(self) -> Server:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def send_message(self, mail: EmailMessage) -> None:
            outbox.append(mail.as_bytes())

    monkeypatch.setattr(smtplib, "SMTP", Server)
    smtp = SmtpSettings(host="mail.example.org", sender="tally@example.org", tls="none")

    def send(message: Message) -> EmailMessage:
        EmailChannel(smtp, "ann@example.org", password="").send(message)
        received = email.message_from_bytes(outbox.pop(), policy=email.policy.default)
        assert isinstance(received, EmailMessage)
        return received

    return send


def test_a_webhook_shows_slack_control_sequences_from_visitors_as_text(
    webhook: Callable[[Message], dict[str, Any]],
) -> None:
    text = webhook(hostile_report())["text"]
    # Tally's own text has no angle brackets: any in the text would be a visitor's live markup.
    assert "<" not in text and ">" not in text, text
    assert "&lt;!channel&gt; &lt;https://evil.example/login|Tally session expired, log in again&gt;" in text
    shown = text.replace(ZERO_WIDTH_SPACE, "")  # (mentions carry one after their @, see the next test)
    assert "&lt;@U024BE7LH&gt; &lt;#C024BE7LR&gt; &amp;amp;" in shown  # the visitor's "&amp;" shows as typed
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text


def test_a_webhook_text_disarms_markdown_links_and_bare_mentions_for_markdown_receivers(
    webhook: Callable[[Message], dict[str, Any]],
) -> None:
    # Mattermost and Discord's Slack-compatible endpoint render the same text as Markdown and ping on @all.
    text = webhook(hostile_report())["text"]
    assert "](" not in text
    for mention in ("@everyone", "@here", "@channel", "@all"):
        assert mention not in text, mention
    shown = text.replace(ZERO_WIDTH_SPACE, "")  # what a reader sees: the visitor's words, unchanged
    assert "[Log in again](https://evil.example/login)" in shown and "@everyone @here @channel @all" in shown


@pytest.mark.parametrize("channel", ["webhook", "mail"])
def test_a_visitor_value_cannot_forge_a_line_or_reorder_the_text_in_any_channel(
    channel: str, request: pytest.FixtureRequest
) -> None:
    send = request.getfixturevalue(channel)

    def text_of(message: Message) -> str:
        received = send(message)
        return str(received["text"] if channel == "webhook" else received.get_content())

    text = text_of(hostile_report())
    assert len(text.splitlines()) == len(text_of(report_of(tame(HOSTILE_PAGES), tame(HOSTILE_SOURCES))).splitlines())
    lines = text.splitlines()
    assert lines.count("Data health:") == 1 and lines.count("  status: ok") == 1
    assert f"/pricing{REPLACEMENT}Data health:{REPLACEMENT}  status: ok" in text
    assert "\x1b" not in text and "\u202e" not in text


def test_an_email_is_plain_text_only_and_its_subject_carries_no_visitor_text(
    mail: Callable[[Message], EmailMessage],
) -> None:
    message = hostile_report()
    received = mail(message)
    # No HTML part: the visitor's <script> is shown as text by any mail client, never run or rendered.
    assert not received.is_multipart() and received.get_content_type() == "text/plain"
    assert "<script>alert(1)</script>" in received.get_content()
    assert received["Subject"] == "Tally weekly report: a.example, 2026-03-02 – 2026-03-08"
    assert sorted(received.keys()) == sorted(
        ["From", "To", "Subject", "Date", "Message-ID", "Content-Type", "Content-Transfer-Encoding", "MIME-Version"]
    )


def test_tallys_own_formatting_and_figures_are_what_they_were_and_the_data_keeps_values_as_sent(
    webhook: Callable[[Message], dict[str, Any]], mail: Callable[[Message], EmailMessage]
) -> None:
    benign = report_of(BENIGN_PAGES, BENIGN_SOURCES)
    text = mail(benign).get_content()
    assert webhook(benign)["text"] == f"*{benign.subject}*\n{text}"
    lines = text.splitlines()
    pages = ("     3,000  /", "       800  /pricing?utm_source=news")
    for row in (*pages, "     1,200  google.com", "       600  Direct / None"):
        assert row in lines, f"{row!r} not in:\n{text}"
    assert "Page views: 5,000 (+25.0%)" in lines and "Top pages (page views):" in lines
    data = webhook(hostile_report())["tally"]  # for programs: the values as the visitor sent them
    assert [r["value"] for r in data["top_sources"]] == [r.value for r in HOSTILE_SOURCES]


@pytest.mark.parametrize(
    ("value", "plain", "slack"),
    [
        ("/pricing", "/pricing", "/pricing"),
        ("<!here> & co", "<!here> & co", "&lt;!here&gt; &amp; co"),
        ("a\r\nb\u2028c\x85d", "a\ufffd\ufffdb\ufffdc\ufffdd", "a\ufffd\ufffdb\ufffdc\ufffdd"),
        ("[x](https://e.example)", "[x](https://e.example)", "[x]\u200b(https://e.example)"),
        ("ann@example.org", "ann@example.org", "ann@\u200bexample.org"),
        ("café/*bold*/_it_", "café/*bold*/_it_", "café/*bold*/_it_"),
    ],
)
def test_each_format_escapes_a_visitor_value_in_its_own_way(value: str, plain: str, slack: str) -> None:
    assert plain_text(value) == plain and slack_text(value) == slack


def test_a_message_left_pending_keeps_its_visitor_values_apart_through_the_ledger() -> None:
    message = hostile_report()
    assert Message.of_record(json.loads(json.dumps(message.as_record()))) == message
    older = {"key": "alert:a:quarantine:t", "subject": "s", "text": "Tally's words", "data": {}}
    assert Message.of_record(older).text == "Tally's words"
