"""The ``tally report`` and ``tally alerts`` commands: scheduled reports and alerts (notify/).

Only argparse loads here; the query layer and the channels load when a command runs, so
``tally --help`` stays fast.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ops.actions import Handler, actions
from ops.site_commands import with_runtime_sites, with_sites_named
from tally.settings import Settings, SettingsError

if TYPE_CHECKING:
    from notify.ledger import Delivery

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _moment(text: str) -> dt.datetime:
    """``--now``: an ISO time, read as UTC when it names no zone."""
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected an ISO time like 2026-03-09T07:00, got {text!r}") from e
    return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true", help="print the messages; send and record nothing")
    parser.add_argument("--now", type=_moment, help="take this time (UTC) as now, e.g. 2026-03-09T07:00")


def add_report_arguments(parser: argparse.ArgumentParser) -> None:
    """``tally report send``."""
    action = actions(parser, "report_action")
    send = action(
        "send",
        run_report_send,
        "Send each report of notify.reports for its newest complete week or month, once per recipient"
        " (a period already sent is skipped; a failed one is tried again). Exit 1 if a delivery failed.",
    )
    send.add_argument("--site", help="only the reports of this site")
    _common(send)


def add_alerts_arguments(parser: argparse.ArgumentParser) -> None:
    """``tally alerts check|status``."""
    action = actions(parser, "alerts_action")
    check = action(
        "check",
        run_alerts_check,
        "Judge every alert rule of notify.alerts now; send one alert per incident (and one when it is over)."
        " Exit 1 if a delivery failed.",
    )
    _common(check)
    action("status", run_alerts_status, "List open incidents and the deliveries (reports and alerts) that failed.")


def run_report(args: argparse.Namespace, settings: Settings) -> int:
    """Dispatch ``tally report <action>``."""
    handler: Handler = args.action
    return handler(args, settings)


def run_alerts(args: argparse.Namespace, settings: Settings) -> int:
    """Dispatch ``tally alerts <action>``."""
    handler: Handler = args.action
    return handler(args, settings)


def _print_outcomes(outcomes: Sequence[Delivery]) -> int:
    failed = [o for o in outcomes if o.status == "failed"]
    for o in outcomes:
        print(f"{o.status:<7} {o.key}  {o.recipient}" + (f"  ({o.error})" if o.error else ""))
    if failed:
        print(f"{len(failed)} delivery(ies) failed after every retry; see `tally alerts status`", file=sys.stderr)
    return EXIT_FAILED if failed else EXIT_OK


def _print_messages(messages: list[tuple[str, str, str]]) -> None:
    for subject, text, recipients in messages:
        print(f"--- {subject}\nto: {recipients}\n\n{text}")


def run_report_send(args: argparse.Namespace, settings: Settings) -> int:
    """Compose every due report, then send it (or print it with --dry-run)."""
    from notify.health import archiver_lag
    from notify.ledger import open_ledger
    from notify.reports import due_reports, send
    from query.sources import Sources

    if not settings.notify.reports:
        print("no reports configured: add them under notify.reports in conf/tally.yaml (docs/REPORTS-AND-ALERTS.md)")
        return EXIT_OK
    now = args.now or dt.datetime.now(dt.UTC)
    settings = with_sites_named(settings, tuple(sub.site for sub in settings.notify.reports))  # runtime sites too
    due = due_reports(settings, Sources(settings), now, lambda: archiver_lag(settings), site=args.site)
    if args.dry_run:
        _print_messages([(d.message.subject, d.message.text, ", ".join(t.recipient for t in d.targets)) for d in due])
        return EXIT_OK
    with open_ledger(settings.home_dir) as ledger:
        outcomes = send(ledger, due, settings)
    if not outcomes:
        print("nothing to send: every due report was already delivered")
    return _print_outcomes(outcomes)


def run_alerts_check(args: argparse.Namespace, settings: Settings) -> int:
    """Read the figures, judge the rules, send what is new (or print it with --dry-run)."""
    from notify.alerts import Instance, check, decide, findings
    from notify.channels import channels
    from notify.health import archiver_lag
    from notify.ledger import open_ledger
    from notify.observe import dead_letter_figures, site_figures
    from query.aggregates import Aggregates

    rules = settings.notify.alerts
    targets = channels(settings.notify.smtp, rules.emails, rules.webhooks)
    if not targets and not args.dry_run:
        print("alerts are off: list notify.alerts.emails or webhooks in conf/tally.yaml (docs/REPORTS-AND-ALERTS.md)")
        return EXIT_OK
    now = args.now or dt.datetime.now(dt.UTC)
    # The sites configured now: every one (runtime sites too) unless the rules name some.
    settings = with_sites_named(settings, rules.sites) if rules.sites else with_runtime_sites(settings)
    agg = Aggregates(settings)
    sites = rules.sites or tuple(s.site_id for s in settings.sites)
    unknown = [site for site in sites if settings.site(site) is None]
    if unknown:
        raise SettingsError(f"notify.alerts.sites: {unknown[0]!r} is not listed under sites:; add it or fix the name")
    figures = [site_figures(settings, agg, site, now, rules) for site in sites]
    instance = Instance(dead_letter_figures(settings, now, rules.deadletter_window_minutes), archiver_lag(settings))
    found = findings(settings, figures, instance)
    with open_ledger(settings.home_dir) as ledger:
        if args.dry_run:  # decided in memory only: the ledger is not saved
            queued = decide(ledger, found, now, dt.timedelta(minutes=rules.quiet_minutes))
            for f in found:
                print(f"{'FIRING' if f.firing else 'ok':<7} {f.site:<24} {f.rule:<18} {f.summary}")
            _print_messages([(m.subject, m.text, ", ".join(t.recipient for t in targets) or "-") for m in queued])
            return EXIT_OK
        outcomes = check(ledger, found, targets, now=now, settings=settings)
    return _print_outcomes(outcomes)


def run_alerts_status(args: argparse.Namespace, settings: Settings) -> int:
    """Open incidents, then failed deliveries, newest last."""
    from notify.ledger import open_ledger

    with open_ledger(settings.home_dir) as ledger:
        incidents = {k: v for k, v in ledger.incidents().items() if v.firing}
        failed = [d for d in ledger.deliveries() if d.status == "failed"]
    print("open incidents:" if incidents else "open incidents: none")
    for (site, rule), state in incidents.items():
        since = f"{state.since:%Y-%m-%d %H:%M}Z" if state.since else "-"
        print(f"  {site:<24} {rule:<18} since {since}  {'alerted' if state.announced else 'quiet period'}")
    print("failed deliveries:" if failed else "failed deliveries: none")
    for d in failed:
        print(f"  {d.at}  {d.key}  {d.recipient}  after {d.attempts} tries: {d.error}")
    return EXIT_FAILED if failed else EXIT_OK
