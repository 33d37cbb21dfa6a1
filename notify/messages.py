"""Messages for people: a report digest or an alert as a subject, a text, and the figures as data.

E-mail sends the subject and text; a webhook posts ``{"text": subject + text, "tally": data}``,
which a Slack incoming webhook shows as a message and any other receiver can read as JSON.
The text keeps visitor values (page paths, sources) apart from Tally's own words, so that each
channel escapes them for its own format as it writes the message (:mod:`notify.escaping`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from notify.digest import Digest, Figures, TopRow
from notify.escaping import plain_text
from notify.rules import EVERY_SITE, Finding


@dataclass(frozen=True)
class VisitorValue:
    """A value a visitor sent (a page path, a source, a utm value...): words for the text, never markup."""

    value: str


Body = tuple[str | VisitorValue, ...]  # Tally's own words, and visitor values among them


@dataclass(frozen=True)
class Message:
    """One thing to tell: ``key`` names it in the ledger (the same key is never sent twice)."""

    key: str
    subject: str  # Tally's own words only: no visitor value goes into a subject
    body: Body
    data: dict[str, Any] = field(default_factory=dict)

    def render(self, escape: Callable[[str], str]) -> str:
        """The text with every visitor value passed through ``escape``, Tally's own words as they are."""
        return "".join(p if isinstance(p, str) else escape(p.value) for p in self.body)

    @property
    def text(self) -> str:
        """The text as plain text, as e-mail sends it and a terminal prints it."""
        return self.render(plain_text)

    def as_record(self) -> dict[str, Any]:
        """The message as JSON values, for the ledger's pending list."""
        return asdict(self)

    @classmethod
    def of_record(cls, record: dict[str, Any]) -> Message:
        """A message from :meth:`as_record` (or from an older ledger's ``text``, Tally's words only)."""
        pieces = record["body"] if "body" in record else [record["text"]]
        body = tuple(p if isinstance(p, str) else VisitorValue(p["value"]) for p in pieces)
        return cls(record["key"], record["subject"], body, record.get("data", {}))


Line = str | Body  # one line of a text, without its newline


def _body(lines: Iterable[Line]) -> Body:
    """The lines as one body, each ended by a newline."""
    pieces: list[str | VisitorValue] = []
    for line in lines:
        pieces += [line] if isinstance(line, str) else line
        pieces.append("\n")
    return tuple(pieces)


def _percent(value: float | None) -> str:
    return f"{value:.0%}" if value is not None else "–"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m {secs:02d}s"


def _change(value: float | None) -> str:
    return f"{value:+.1%}" if value is not None else "no previous figure"


def _kpi_lines(digest: Digest) -> list[str]:
    now: Figures = digest.current
    shown = {
        "visitors": f"≈ {now.visitors:,.0f} ± {now.visitors_bound:.1%}",
        "pageviews": f"{now.pageviews:,}",
        "visits": f"{now.visits:,}",
        "bounce_rate": _percent(now.bounce_rate),
        "visit_duration_s": _duration(now.visit_duration_s),
    }
    names = {
        "visitors": "Unique visitors",
        "pageviews": "Page views",
        "visits": "Visits",
        "bounce_rate": "Bounce rate",
        "visit_duration_s": "Visit duration",
    }
    return [f"{names[m]}: {shown[m]} ({_change(digest.change(m))})" for m in names]


def _top_lines(title: str, rows: tuple[TopRow, ...]) -> list[Line]:
    if not rows:
        return [f"{title}: none in this period"]
    return [f"{title}:", *((f"  {r.pageviews:>8,}  ", VisitorValue(r.value)) for r in rows)]


def report_message(digest: Digest) -> Message:
    """The digest as a message; figures as the dashboard shows them, the change in brackets."""
    period = f"{digest.days.start} – {digest.days.end}"
    previous = f"{digest.previous.start} – {digest.previous.end}"
    lines: list[Line] = [
        f"{digest.site}, {period} ({digest.timezone}, bots excluded), change against {previous}:",
        "",
        *_kpi_lines(digest),
        "",
        *_top_lines("Top pages (page views)", digest.top_pages),
        *_top_lines("Top sources (page views)", digest.top_sources),
        "",
        "Data health:",
        *(f"  {line}" for line in digest.health.lines()),
        *(f"  attention: {p}" for p in digest.health.problems),
    ]
    return Message(
        key=f"report:{digest.site}:{digest.period}:{digest.days.start}",
        subject=f"Tally {digest.period} report: {digest.site}, {period}",
        body=_body(lines),
        data=digest.as_data(),
    )


RULE_TITLES = {
    "traffic_threshold": "traffic past its threshold",
    "traffic_unusual": "traffic far from usual",
    "tracking_stopped": "tracking stopped",
    "deadletter_surge": "dead-letter surge",
    "archive_lag": "archive lag",
    "views_lag": "views lag",
    "quarantine": "quarantined partition",
}


def alert_message(finding: Finding, since: str, *, recovery: bool) -> Message:
    """An alert (or its recovery) for one incident; ``since`` (ISO time) keys the incident."""
    title = RULE_TITLES.get(finding.rule, finding.rule)
    where = "every site" if finding.site == EVERY_SITE else finding.site
    if recovery:
        subject = f"Tally resolved: {title} on {where}"
        text = f"Resolved: {title} on {where} (since {since}) is over.\nIt was: {finding.summary}\n"
    else:
        subject = f"Tally alert: {title} on {where}"
        text = f"{finding.summary}\n\n(one alert per incident; a message follows when it is over)\n"
    kind = "recovery" if recovery else "alert"
    return Message(
        key=f"{kind}:{finding.site}:{finding.rule}:{since}",
        subject=subject,
        body=(text,),
        data={"kind": kind, "rule": finding.rule, "site": finding.site, "since": since, "summary": finding.summary},
    )
