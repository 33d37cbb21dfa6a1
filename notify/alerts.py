"""``tally alerts check``: judge every rule, keep each incident's state, and send what is new.

Each check reads the figures (:mod:`notify.observe`), turns them into findings (:mod:`notify.rules`),
steps each (site, rule) incident (:mod:`notify.incidents`) and queues the alerts and recoveries in
the ledger before sending them, so a run that dies sends them on the next check, once.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from dataclasses import dataclass

from notify import rules
from notify.channels import Channel
from notify.incidents import step
from notify.ledger import Delivery, Ledger, Sleep, deliver
from notify.messages import Message, alert_message
from notify.observe import DeadLetterFigures, SiteFigures
from query.freshness import views_lag
from tally.settings import Settings


@dataclass(frozen=True)
class Instance:
    """Figures of the whole instance: dead letters and the archive lag (None = unknown)."""

    dead_letters: DeadLetterFigures
    archive_lag: dt.timedelta | None


def findings(settings: Settings, sites: Sequence[SiteFigures], instance: Instance) -> list[rules.Finding]:
    """Every rule's verdict: per site, then for the whole instance."""
    r = settings.notify.alerts
    limit = dt.timedelta(minutes=settings.alerts.lag_minutes)
    found = []
    for s in sites:
        behind = views_lag(s.newest_event, s.newest_window, s.now.date())
        found += [
            rules.traffic_threshold(
                s.site, s.hour, s.hour_pageviews, above=r.pageviews_per_hour_above, below=r.pageviews_per_hour_below
            ),
            rules.traffic_unusual(
                s.site, s.hour, s.hour_pageviews, s.hour_history, factor=r.usual_factor, min_days=r.usual_min_days
            ),
            rules.tracking_stopped(
                s.site,
                s.now,
                s.newest_event,
                s.now_history,
                minutes=r.tracking_stopped_minutes,
                min_days=r.usual_min_days,
            ),
            rules.lag("views_lag", s.site, behind, limit, "the views are"),
            rules.quarantine(s.site, s.quarantined),
        ]
    dead = instance.dead_letters
    found += [
        rules.deadletter_surge(
            dead.recent,
            dead.baseline,
            window_minutes=r.deadletter_window_minutes,
            min_count=r.deadletter_min_count,
            factor=r.deadletter_factor,
        ),
        rules.lag("archive_lag", rules.EVERY_SITE, instance.archive_lag, limit, "the archive is"),
    ]
    return found


def decide(ledger: Ledger, found: Sequence[rules.Finding], now: dt.datetime, quiet: dt.timedelta) -> list[Message]:
    """Step every incident and queue its alert or recovery in ``ledger`` (in memory until saved)."""
    queued = []
    for finding in found:
        state = ledger.incident(finding.site, finding.rule)
        new, action = step(state, finding.firing, now, quiet, finding.summary)
        ledger.set_incident(finding.site, finding.rule, new)
        if action == "alert":
            assert new.since is not None
            message = alert_message(finding, new.since.isoformat(), recovery=False)
        elif action == "recovery":
            assert state.since is not None
            was = rules.Finding(finding.rule, finding.site, False, state.summary)
            message = alert_message(was, state.since.isoformat(), recovery=True)
        else:
            continue
        ledger.add_pending(message)
        queued.append(message)
    return queued


def check(
    ledger: Ledger,
    found: Sequence[rules.Finding],
    targets: Sequence[Channel],
    *,
    now: dt.datetime,
    settings: Settings,
    sleep: Sleep = time.sleep,
) -> list[Delivery]:
    """Decide, save, then deliver every pending message (this check's and any a dead run left)."""
    n = settings.notify
    decide(ledger, found, now, dt.timedelta(minutes=n.alerts.quiet_minutes))
    ledger.save()
    outcomes = []
    for message in ledger.pending():
        outcomes += deliver(
            ledger, message, targets, attempts=n.attempts, retry_seconds=n.retry_seconds, clock=lambda: now, sleep=sleep
        )
        ledger.done(message.key)
    return outcomes
