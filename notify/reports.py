"""``tally report send``: each configured report's newest complete period, sent once per recipient.

Run it as often as you like (the schedule runs it daily): a period already delivered to a
recipient is skipped, one that failed is tried again on the next run.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from dataclasses import dataclass

from notify.channels import Channel, channels
from notify.digest import compose
from notify.health import ArchiveLagProbe, Health, site_health
from notify.ledger import Delivery, Ledger, Sleep, deliver
from notify.messages import Message, report_message
from notify.periods import due_period
from query.site_time import local_today
from query.sources import Sources
from tally.settings import ReportSubscription, Settings, SettingsError


@dataclass(frozen=True)
class DueReport:
    subscription: ReportSubscription
    message: Message
    targets: tuple[Channel, ...]


def due_reports(
    settings: Settings,
    sources: Sources,
    now: dt.datetime,
    archive_lag: ArchiveLagProbe,
    *,
    site: str | None = None,
) -> list[DueReport]:
    """The message of every configured report (of ``site`` only, if given) for its newest complete period."""
    health: dict[str, Health] = {}
    due = []
    for sub in settings.notify.reports:
        if site is not None and sub.site != site:
            continue
        if settings.site(sub.site) is None:
            raise SettingsError(f"notify.reports: site {sub.site!r} is not listed under sites:; add it or fix the name")
        if sub.site not in health:
            health[sub.site] = site_health(settings, sources.aggregates, sub.site, now, archive_lag)
        days = due_period(sub.period, local_today(sources.timezone(sub.site), now))  # the site's own days
        digest = compose(sources, sub.site, sub.period, days, health[sub.site])
        targets = tuple(channels(settings.notify.smtp, sub.emails, sub.webhooks))
        due.append(DueReport(sub, report_message(digest), targets))
    return due


def send(ledger: Ledger, due: Sequence[DueReport], settings: Settings, *, sleep: Sleep = time.sleep) -> list[Delivery]:
    """Deliver each due report to the recipients that do not have it yet."""
    outcomes = []
    for report in due:
        outcomes += deliver(
            ledger,
            report.message,
            report.targets,
            attempts=settings.notify.attempts,
            retry_seconds=settings.notify.retry_seconds,
            sleep=sleep,
        )
    return outcomes
