"""The ``tally`` commands that run view jobs: ``backfill`` (and the parsing of its dates)."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from typing import TYPE_CHECKING

from tally.settings import Settings
from tally.tables import BACKFILL_VIEWS, ViewSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from jobs.backfill import BackfillPlan

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
    parser.add_argument(
        "--allow-empty",
        action="store_true",
        help="also replace dates with no raw events, emptying their views (default: keep them as they are)",
    )
    parser.add_argument(
        "--view",
        dest="views",
        action="append",
        choices=[spec.table for spec in BACKFILL_VIEWS],
        metavar="TABLE",
        help="recompute only this view (repeatable; default: every view), e.g. after fixing a bug in it: "
        + ", ".join(spec.table for spec in BACKFILL_VIEWS),
    )


def named_views(tables: list[str] | None) -> list[ViewSpec]:
    """The views ``--view`` names, in ``BACKFILL_VIEWS`` order; every view if none is named."""
    return [spec for spec in BACKFILL_VIEWS if not tables or spec.table in tables]


# What a Ctrl-C leaves: each view's run of dates is one Delta commit, made whole or not at all.
INTERRUPTED = (
    "tally backfill: interrupted. Each view's dates are either as they were or wholly rewritten (each run of"
    " dates is one commit); run the same backfill again to finish it."
)
CHECKS_INTERRUPTED = (
    "tally backfill: the views are written, but their data-quality checks were interrupted; run"
    " `tally check --date YYYY-MM-DD` for the dates it replaced."
)


def run_backfill(
    settings: Settings,
    *,
    start: dt.date,
    end: dt.date,
    site_id: str | None,
    dry_run: bool,
    allow_empty: bool = False,
    progress: bool = True,
    views: list[ViewSpec] | None = None,
) -> int:
    """Run (or plan) a backfill of ``views`` (every view by default) and print its report; the exit
    code for the CLI."""
    from jobs.backfill import BackfillError, plan
    from jobs.spark import spark_session

    views = list(BACKFILL_VIEWS) if views is None else views
    spark = spark_session(settings, "tally-backfill")
    try:
        if dry_run:
            report = plan(spark, settings, start, end, site_id, allow_empty=allow_empty)
        else:
            report = backfilled(
                spark,
                settings,
                views,
                start=start,
                end=end,
                site_id=site_id,
                allow_empty=allow_empty,
                progress=progress,
            )
    except BackfillError as e:
        print(f"tally backfill: {e}", file=sys.stderr)
        return 2
    print("\n".join(backfill_report_lines(report, dry_run=dry_run, views=[spec.table for spec in views])))
    if dry_run:
        from jobs.backfill_chunks import chunk_events, plan_chunks

        budget = chunk_events(spark, settings)
        print(jobs_line(plan_chunks(settings, start, end, budget), budget))
    return 0


def backfilled(
    spark: SparkSession,
    settings: Settings,
    views: list[ViewSpec],
    *,
    start: dt.date,
    end: dt.date,
    site_id: str | None,
    allow_empty: bool,
    progress: bool,
) -> BackfillPlan:
    """Backfill ``views`` and check the partitions replaced. A Ctrl-C (PySpark's handler has cancelled
    the Spark jobs under way) says what it left, then ends the command: `tally forget` stops too."""
    from jobs.backfill import backfill

    try:
        report = backfill(
            spark,
            settings,
            start=start,
            end=end,
            site_id=site_id,
            allow_empty=allow_empty,
            progress=progress,
            views=views,
        )
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        raise
    if report.replaced_dates:  # every backfill is checked: a failing partition is quarantined until fixed
        try:
            check_backfilled(settings, report.replaced_dates, views)
        except KeyboardInterrupt:
            print(CHECKS_INTERRUPTED, file=sys.stderr)
            raise
    return report


def check_backfilled(settings: Settings, dates: list[dt.date], views: list[ViewSpec]) -> None:
    """Run the data-quality suites over the partitions a backfill replaced and print what they quarantined."""
    from quality.checks import run_checks

    checked = run_checks(settings, dates=dates, tables=[spec.table for spec in views])
    failed = [f"{o.table} {o.partition_date}" for o in checked.outcomes if o.failed]
    print(f"data-quality suites: {len(checked.outcomes)} partitions checked, {len(failed)} quarantined")
    for name in failed:
        print(f"  quarantined: {name} (see `tally check --table ... --date ...`)")


def jobs_line(chunks: list[tuple[dt.date, dt.date]], budget: int) -> str:
    """How a backfill would split its dates into Spark jobs (the ``--dry-run`` report's last line)."""
    runs = ", ".join(str(first) if first == last else f"{first} .. {last}" for first, last in chunks)
    jobs = "1 Spark job" if len(chunks) == 1 else f"{len(chunks)} Spark jobs"
    return f"in {jobs} of at most {budget:,} raw events each (spark.backfill_chunk_events): {runs}"


def backfill_report_lines(report: BackfillPlan, *, dry_run: bool, views: list[str]) -> list[str]:
    """The backfill's report: raw events per date, each kept date named, then what was replaced."""
    would = "would be " if dry_run else ""
    scope = f"site {report.site_id}" if report.site_id else "every site"
    lines = [f"{report.start} .. {report.end}, {scope}: {report.raw_events:,} raw events"]
    kept = set(report.kept_dates)
    for day in report.dates:
        events = report.raw_events_by_date.get(day, 0)
        if events:
            lines.append(f"  {day}: {events:,} events")
        else:
            lines.append(f"  {day}: no raw events, views {would}{'kept' if day in kept else 'emptied'}")
    replaced = len(report.replaced_dates)
    lines.append(f"{'would replace' if dry_run else 'replaced'} {_dates(replaced)} in: " + ", ".join(views))
    if kept:
        lines.append(
            f"{'would keep' if dry_run else 'kept'} {_dates(len(kept))} without raw events as they were;"
            " --allow-empty replaces them with nothing"
        )
    return lines


def _dates(count: int) -> str:
    return f"{count} date" if count == 1 else f"{count} dates"


def cmd_backfill(args: argparse.Namespace, settings: Settings) -> int:
    return run_backfill(
        settings,
        start=args.start,
        end=args.end,
        site_id=args.site,
        dry_run=args.dry_run,
        allow_empty=args.allow_empty,
        progress=sys.stderr.isatty(),
        views=named_views(args.views),
    )
