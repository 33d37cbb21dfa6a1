"""Delivery channels: e-mail through an SMTP server, and webhooks (JSON with a Slack-compatible ``text``).

A channel sends one message to one recipient, or raises :class:`DeliveryError` saying why. Each
writes the visitor values of the message in its own format (:mod:`notify.escaping`): the e-mail
is plain text only (no HTML part), the webhook's ``text`` is Slack mrkdwn.
"""

from __future__ import annotations

import hashlib
import os
import smtplib
import ssl
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Protocol
from urllib.parse import urlsplit

import httpx

from notify.escaping import plain_text, slack_text
from notify.messages import Message
from tally.settings import SmtpSettings

PASSWORD_VARIABLE = "TALLY_SMTP_PASSWORD"


class DeliveryError(RuntimeError):
    """A message could not be delivered; the text says what the server answered."""


class Channel(Protocol):
    """One recipient on one channel."""

    @property
    def recipient(self) -> str:
        """The ledger's name of the recipient (never a secret: a webhook is named by a hash)."""
        ...

    def send(self, message: Message) -> None: ...


class EmailChannel:
    """E-mail to one address through ``notify.smtp`` (STARTTLS, SSL, or plain to a local relay)."""

    def __init__(self, smtp: SmtpSettings, address: str, *, password: str | None = None) -> None:
        assert smtp.host, "an e-mail channel needs notify.smtp.host"
        self.smtp, self.address = smtp, address
        self.password = password if password is not None else os.environ.get(PASSWORD_VARIABLE, "")

    @property
    def recipient(self) -> str:
        return f"mailto:{self.address}"

    def send(self, message: Message) -> None:
        mail = EmailMessage()
        mail["From"], mail["To"], mail["Subject"] = self.smtp.sender, self.address, message.subject
        mail["Date"] = formatdate(usegmt=True)
        mail["Message-ID"] = make_msgid(hashlib.sha256(message.key.encode()).hexdigest()[:16], "tally")
        mail.set_content(message.render(plain_text))  # plain text only: no HTML part to escape for
        s = self.smtp
        try:
            if s.tls == "ssl":
                client: smtplib.SMTP = smtplib.SMTP_SSL(
                    s.host, s.port, timeout=s.timeout_seconds, context=ssl.create_default_context()
                )
            else:
                client = smtplib.SMTP(s.host, s.port, timeout=s.timeout_seconds)
            with client:
                if s.tls == "starttls":
                    client.starttls(context=ssl.create_default_context())
                if s.username:
                    client.login(s.username, self.password)
                client.send_message(mail)
        except (smtplib.SMTPException, OSError) as e:
            raise DeliveryError(f"SMTP {s.host}:{s.port}: {e}") from e


class WebhookChannel:
    """A JSON POST: ``text`` for Slack-compatible receivers, ``tally`` with every figure for others."""

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        self.url, self.timeout = url, timeout

    @property
    def recipient(self) -> str:
        # A Slack webhook URL is a credential: the ledger and the logs name its host and a hash only.
        digest = hashlib.sha256(self.url.encode()).hexdigest()[:12]
        return f"webhook:{urlsplit(self.url).hostname}:{digest}"

    def send(self, message: Message) -> None:
        # ``text`` is Slack mrkdwn: visitor values escaped for it; ``tally`` keeps them as sent, as data.
        body = {"text": f"*{message.subject}*\n{message.render(slack_text)}", "tally": message.data}
        try:
            answer = httpx.post(self.url, json=body, timeout=self.timeout)
        except httpx.HTTPError as e:
            raise DeliveryError(f"webhook {urlsplit(self.url).hostname}: {e}") from e
        if not answer.is_success:
            raise DeliveryError(f"webhook {urlsplit(self.url).hostname}: HTTP {answer.status_code}")


def channels(smtp: SmtpSettings, emails: tuple[str, ...], webhooks: tuple[str, ...]) -> list[Channel]:
    """One channel per listed address and webhook."""
    found: list[Channel] = [EmailChannel(smtp, a) for a in emails]
    return found + [WebhookChannel(u) for u in webhooks]
