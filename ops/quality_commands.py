"""The ``tally check`` and ``tally audit`` commands: arguments, and running them for the CLI.

Only argparse and the date parser load here; Great Expectations, Kafka and pandas load when a
command runs, so ``tally --help`` stays fast.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys

from ops.job_commands import parse_day
from quality.contracts import CHECKED_TABLES
from tally.settings import Settings

EXIT_OK, EXIT_MISMATCH, EXIT_ERROR = 0, 1, 2


def add_check_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--table",
        dest="tables",
        action="append",
        choices=CHECKED_TABLES,
        metavar="TABLE",
        help=f"check only this table (repeatable; default: all of {', '.join(CHECKED_TABLES)})",
    )
    parser.add_argument(
        "--date",
        dest="dates",
        action="append",
        type=parse_day,
        metavar="DATE",
        help="partition date to check: YYYY-MM-DD, today, yesterday or N-days-ago (repeatable; default: today)",
    )


def run_check(args: argparse.Namespace, settings: Settings) -> int:
    """Run the suites, print one line per partition; 1 if any partition was quarantined."""
    from quality.checks import render, run_checks

    dates: list[dt.date] = args.dates or [parse_day("today")]
    run = run_checks(settings, dates=sorted(set(dates)), tables=args.tables, progress=sys.stderr.isatty())
    print(render(run))
    return EXIT_OK if run.ok else EXIT_MISMATCH


def add_audit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--from",
        dest="start",
        type=parse_day,
        required=True,
        metavar="DATE",
        help="first event date: YYYY-MM-DD, today, yesterday or N-days-ago",
    )
    parser.add_argument(
        "--to", dest="end", type=parse_day, required=True, metavar="DATE", help="last event date, inclusive"
    )
    parser.add_argument("--site", help="only this site_id (default: every site)")


def run_audit(args: argparse.Namespace, settings: Settings) -> int:
    """Reconcile Kafka, raw and the views; print the report; 1 on any mismatch, 2 if it cannot run."""
    from quality.audit import AuditError, audit, render
    from quality.kafka_log import KafkaReadError

    try:
        report = audit(settings, start=args.start, end=args.end, site_id=args.site)
    except (AuditError, KafkaReadError, ValueError) as e:
        print(f"tally audit: {e}", file=sys.stderr)
        return EXIT_ERROR
    print(render(report))
    return EXIT_OK if report.ok else EXIT_MISMATCH
