"""The ``tally`` commands that run view jobs: ``backfill`` (and the parsing of its dates)."""

from __future__ import annotations

import argparse
import datetime as dt
import sys

from tally.settings import Settings

RELATIVE_DAYS = {"today": 0, "yesterday": 1}


def parse_day(text: str, *, today: dt.date | None = None) -> dt.date:
    """``YYYY-MM-DD``, ``today``, ``yesterday`` or ``N-days-ago`` (UTC) as a date."""
    today = today or dt.datetime.now(dt.UTC).date()
    if text in RELATIVE_DAYS:
        return today - dt.timedelta(days=RELATIVE_DAYS[text])
    if text.endswith("-days-ago") and text.removesuffix("-days-ago").isdigit():
        return today - dt.timedelta(days=int(text.removesuffix("-days-ago")))
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a date: use YYYY-MM-DD, today, yesterday or N-days-ago"
        ) from None


def add_backfill_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--from", dest="start", type=parse_day, required=True, help="first date (YYYY-MM-DD, yesterday, …)"
    )
    parser.add_argument("--to", dest="end", type=parse_day, required=True, help="last date, inclusive")
    parser.add_argument("--site", help="only this site_id (default: every site)")
    parser.add_argument("--dry-run", action="store_true", help="show what would be recomputed; write nothing")


def run_backfill(
    settings: Settings, *, start: dt.date, end: dt.date, site_id: str | None, dry_run: bool, progress: bool = True
) -> int:
    """Run (or plan) a backfill and print its report; the exit code for the CLI."""
    from jobs.backfill import BackfillError, backfill, plan
    from jobs.spark import spark_session
    from tally.tables import BACKFILL_VIEWS

    spark = spark_session(settings, "tally-backfill")
    try:
        if dry_run:
            report = plan(spark, settings, start, end, site_id)
        else:
            report = backfill(spark, settings, start=start, end=end, site_id=site_id, progress=progress)
    except BackfillError as e:
        print(f"tally backfill: {e}", file=sys.stderr)
        return 2
    if not dry_run:
        # Every backfill is checked: a failing partition is quarantined until fixed.
        from quality.checks import run_checks

        days = [start + dt.timedelta(days=i) for i in range((end - start).days + 1)]
        checked = run_checks(settings, dates=days, tables=[spec.table for spec in BACKFILL_VIEWS])
        failed = [f"{o.table} {o.partition_date}" for o in checked.outcomes if o.failed]
        print(f"data-quality suites: {len(checked.outcomes)} partitions checked, {len(failed)} quarantined")
        for name in failed:
            print(f"  quarantined: {name} (see `tally check --table ... --date ...`)")
    scope = f"site {site_id}" if site_id else "every site"
    verb = "would replace" if dry_run else "replaced"
    print(f"{start} .. {end}, {scope}: {report.raw_events:,} raw events")
    for day in sorted(report.raw_events_by_date):
        print(f"  {day}: {report.raw_events_by_date[day]:,} events")
    print(f"{verb} those dates in: " + ", ".join(spec.table for spec in BACKFILL_VIEWS))
    return 0


def cmd_backfill(args: argparse.Namespace, settings: Settings) -> int:
    return run_backfill(
        settings, start=args.start, end=args.end, site_id=args.site, dry_run=args.dry_run, progress=sys.stderr.isatty()
    )
