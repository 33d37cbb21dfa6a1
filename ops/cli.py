"""``tally``: the operator's command line. Every command has ``--help``."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections.abc import Callable

from ops.access_commands import add_share_arguments, add_user_arguments, dashboard_login_line, run_share, run_user
from ops.annotate_commands import add_annotate_arguments, run_annotate
from ops.apikey_commands import add_apikey_arguments, run_apikey
from ops.bootstrap import setup
from ops.changes_commands import add_changes_arguments, run_changes
from ops.export_commands import add_export_arguments, run_export
from ops.import_commands import add_import_arguments, run_import
from ops.job_commands import add_backfill_arguments, cmd_backfill
from ops.notify_commands import add_alerts_arguments, add_report_arguments, run_alerts, run_report
from ops.private_home import make_home_private
from ops.processes import ProcessError
from ops.quality_commands import add_audit_arguments, add_check_arguments, run_audit, run_check
from ops.schedule import add_arguments as add_schedule_arguments
from ops.schedule import run as run_schedule
from ops.site_commands import add_site_arguments, run_site
from ops.stack import WATCHDOG, Stack, api_url, dashboard_url, ingest_url
from ops.systemd import add_arguments as add_systemd_arguments
from ops.systemd import run as run_systemd
from tally.jvm import SetupError
from tally.log import setup_logging
from tally.settings import Settings, SettingsError, load_settings
from tally.tables import VISITOR_VIEWS

log = logging.getLogger("tally")


def cmd_setup(args: argparse.Namespace, settings: Settings) -> int:
    setup()
    print("setup complete: Java ok, Kafka and Spark jars resolved from Maven Central")
    return 0


def cmd_up(args: argparse.Namespace, settings: Settings) -> int:
    setup()
    login = dashboard_login_line(settings)  # before the dashboard starts: it is private from its first page
    Stack(settings).up(traffic=args.traffic)
    print(
        f"\nTally is up.\n  dashboard: {dashboard_url(settings)}\n  {login}"
        f"\n  ingest:    {ingest_url(settings)}/api/event"
        f"\n  stats API: {api_url(settings)}/api/v2/query (keys: tally apikey create)"
        f'\n  snippet:   <script defer data-site="{settings.traffic.site_id}" src="{ingest_url(settings)}/t.js">'
        "</script>\n  stop with: tally down"
    )
    return 0


def cmd_down(args: argparse.Namespace, settings: Settings) -> int:
    stopped = Stack(settings).down()
    print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
    return 0


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    from archiver.lag import archive_lag
    from ops.broker import broker_answers

    rows = Stack(settings).status()
    print(f"{'SERVICE':<10} {'STATE':<8} {'PID':>7}  {'PORT':>5}  {'RESTARTS':>8}  LOG")
    for row in rows:
        pid = str(row.running.pid) if row.running else "-"
        port = str(row.port) if row.port else "-"
        print(f"{row.name:<10} {row.state:<8} {pid:>7}  {port:>5}  {row.restarts:>8}  {row.log}")
    for row in rows:
        if row.state == "failed":
            print(f"\n{row.name}: the watchdog gave up ({row.gave_up}); see {row.log}, fix it, then run `tally up`")
    watchdog_down = any(r.name == WATCHDOG and r.state != "running" for r in rows)
    if watchdog_down and any(r.state == "crashed" for r in rows):
        print("\nthe watchdog is not running, so nothing restarts the crashed services: run `tally up`")
    print(f"\nkafka: {settings.kafka.servers}  warehouse: {settings.warehouse_uri}")
    if broker_answers(settings.kafka.servers, client_config=settings.kafka.client_config()):
        lag = archive_lag(settings)
        for topic in (settings.kafka.pageviews_topic, settings.kafka.rejected_topic):
            parts = {p: n for (t, p), n in lag.items() if t == topic}
            detail = " ".join(f"p{p}={n}" for p, n in sorted(parts.items()))
            print(f"archive lag {topic}: {sum(parts.values())} messages ({detail})")
    return 0


def cmd_sql(args: argparse.Namespace, settings: Settings) -> int:
    from jobs.catalog import register_tables
    from jobs.spark import spark_session

    spark = spark_session(settings, "tally-sql")
    tables = register_tables(spark, settings)
    if not tables:
        print("no tables yet: start the stack (tally up) and send some events first", file=sys.stderr)
        return 1
    result = spark.sql(args.query)
    result.show(n=args.limit, truncate=not args.no_truncate)
    return 0


def cmd_forget(args: argparse.Namespace, settings: Settings) -> int:
    import datetime as dt

    from archiver.maintenance import forget, forget_site_views, vacuum_now
    from jobs.backfill import date_runs
    from ops.job_commands import run_backfill
    from ops.processes import Supervisor
    from ops.stack import services
    from tally.tables import BACKFILL_VIEWS

    if not (args.visitor or args.before or args.site):
        print("tally forget: give --site S (a whole site), --visitor V --site S, or --before DATE", file=sys.stderr)
        return 2
    whole_site = bool(args.site and not args.visitor and not args.before)
    before = dt.date.fromisoformat(args.before) if args.before else None
    supervisor = Supervisor(settings.home_dir)
    # VACUUM with zero retention must not race a writer's uncommitted files: pause the writers.
    paused = [name for name in ("archiver", "views") if supervisor.stop(name)]
    code = 0
    try:
        report = forget(settings, site_id=args.site, visitor_id=args.visitor, before=before)
        if whole_site:  # its views go too: nothing of the site is left to count
            views = forget_site_views(settings, args.site, tuple(view.table for view in BACKFILL_VIEWS))
            report = dataclasses.replace(
                report,
                rows_deleted=report.rows_deleted | views.rows_deleted,
                files_removed=report.files_removed | views.files_removed,
            )
        for table, rows in report.rows_deleted.items():
            print(f"{table}: {rows} rows deleted, {report.files_removed[table]} files removed from storage")
        if report.visitor_dates and not args.no_backfill:
            # Sessions carry visitor ids: rebuild the views of those dates, then drop the old files.
            # allow_empty: a date the visitor was alone on has no raw events left, and its views must
            # still be replaced (by nothing), or they would keep counting the forgotten visitor. Only
            # the visitor's own dates are replaced, so a date emptied by retention keeps its views.
            for start, end in date_runs(list(report.visitor_dates)):
                print(f"recomputing the views of {start} .. {end} without the visitor:")
                rebuilt = run_backfill(
                    settings, start=start, end=end, site_id=args.site, dry_run=False, allow_empty=True, progress=False
                )
                code = code or rebuilt
            for view in VISITOR_VIEWS:
                removed = vacuum_now(settings, view.table)
                print(f"{view.table}: {removed} files removed from storage")
    finally:
        for name in paused:
            supervisor.start(services(settings)[name])
    print(
        f"Kafka still holds these events until its retention ({settings.kafka.retention_hours} h) expires;"
        " the log cannot delete single records. Views other than"
        f" {' and '.join(view.table for view in VISITOR_VIEWS)} hold no visitor ids."
    )
    return code


def cmd_maintain(args: argparse.Namespace, settings: Settings) -> int:
    from archiver.maintenance import maintain

    reports = maintain(
        settings,
        vacuum_hours=args.vacuum_hours,
        retention_days=args.retention_days,
        rejected_retention_days=args.rejected_retention_days,
    )
    for r in reports:
        print(
            f"{r.table}: {r.files_compacted} small files compacted, {r.files_vacuumed} old files vacuumed, "
            f"{r.rows_expired} rows past retention deleted"
        )
    return 0


def cmd_traffic(args: argparse.Namespace, settings: Settings) -> int:
    from simulator.generator import run_traffic

    sent = run_traffic(
        settings,
        rate=args.rate or settings.traffic.rate,
        duration=args.duration,
        target=args.target or ingest_url(settings),
    )
    print(f"sent {sent.accepted} accepted beacons ({sent.failed} failed) to the ingest endpoint")
    return 0 if sent.failed == 0 else 1


def cmd_mcp(args: argparse.Namespace, settings: Settings) -> int:
    from api.mcp_server import McpStartError, serve_stdio  # the MCP SDK loads only for this command

    try:
        serve_stdio(settings)
    except McpStartError as e:
        print(f"tally mcp: {e}", file=sys.stderr)
        return 2
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tally", description="Tally: self-hosted, privacy-first web analytics.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, handler: Callable[[argparse.Namespace, Settings], int], text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=text, description=text)
        p.set_defaults(handler=handler)
        return p

    add("setup", cmd_setup, "Check Java and Maven; fetch the Kafka broker and Spark package jars from Maven Central.")
    up = add(
        "up",
        cmd_up,
        "Start the stack (broker, ingest, archiver, streaming views, dashboard) and a watchdog that restarts"
        " a crashed service; idempotent.",
    )
    up.add_argument("--traffic", action="store_true", help="also run the synthetic traffic generator")
    add("down", cmd_down, "Stop every process `tally up` started (and only those).")
    add("status", cmd_status, "Show which services run, with PID, port, restarts and log file.")
    systemd = add("systemd", run_systemd, "Write systemd units (Restart=always) to run the stack on a production host.")
    add_systemd_arguments(systemd)
    sql = add("sql", cmd_sql, "Run Spark SQL over the Delta tables (raw.pageviews, raw.rejected, agg.*).")
    sql.add_argument("query", help='e.g. "SELECT path, COUNT(*) FROM raw.pageviews GROUP BY path"')
    sql.add_argument("--limit", type=int, default=50, help="rows to show (default 50)")
    sql.add_argument("--no-truncate", action="store_true", help="show full cell values")
    forget = add(
        "forget",
        cmd_forget,
        "Delete a visitor's events, a whole site's data (--site alone), or all before a date, and VACUUM.",
    )
    forget.add_argument(
        "--site",
        help="site_id the visitor belongs to; alone: delete the site's events and views (tally site remove first)",
    )
    forget.add_argument("--visitor", help="visitor_id to delete")
    forget.add_argument("--before", help="delete every event dated before this day (YYYY-MM-DD)")
    forget.add_argument("--no-backfill", action="store_true", help="do not recompute the visitor's dates now")
    backfill = add(
        "backfill", cmd_backfill, "Recompute the views (every one, or those --view names) for a range of dates."
    )
    add_backfill_arguments(backfill)
    audit = add(
        "audit", run_audit, "Reconcile Kafka, raw.pageviews and the views for event dates; exit 1 on a mismatch."
    )
    add_audit_arguments(audit)
    check = add("check", run_check, "Run the data-quality suites on table partitions; quarantine the failing ones.")
    add_check_arguments(check)
    schedule = add("schedule", run_schedule, "Run the recurring jobs of conf/tally.yaml (cron syntax, UTC).")
    add_schedule_arguments(schedule)
    maintain = add("maintain", cmd_maintain, "Compact small files, expire old raw rows, VACUUM the raw tables.")
    maintain.add_argument("--vacuum-hours", type=int, default=168, help="keep unreferenced files this long")
    maintain.add_argument("--retention-days", type=int, default=0, help="delete raw rows older than this; 0 = keep")
    maintain.add_argument(
        "--rejected-retention-days",
        type=int,
        help="delete raw.rejected rows older than this (default: archiver.rejected_retention_days, 30); 0 = keep,"
        " unless --retention-days is set",
    )
    traffic = add("traffic", cmd_traffic, "Send realistic synthetic beacons to the ingest endpoint.")
    traffic.add_argument("--rate", type=float, help="beacons per second (default: traffic.rate)")
    traffic.add_argument("--duration", type=float, default=0, help="seconds to run; 0 = until Ctrl-C")
    traffic.add_argument("--target", help="ingest base URL (default: the configured ingest)")
    annotate = add("annotate", run_annotate, "Note something on a site's day; shown on the time series and in the API.")
    add_annotate_arguments(annotate)
    imported = add(
        "import", run_import, "Import a site's history from Plausible's or Umami's export; list and remove imports."
    )
    add_import_arguments(imported)
    exported = add(
        "export", run_export, "Write a site's figures as Plausible's CSV export ZIP (tally import reads it)."
    )
    add_export_arguments(exported)
    site = add(
        "site",
        run_site,
        "Add, list and remove sites at runtime (no restart): ingest and the Stats API follow them within seconds.",
    )
    add_site_arguments(site)
    apikey = add("apikey", run_apikey, "Create, list and revoke Stats API keys (stored hashed, scoped to sites).")
    add_apikey_arguments(apikey)
    add(
        "mcp",
        cmd_mcp,
        "Serve the Stats API to an MCP client (e.g. Claude Desktop) over stdio: tools query and list_sites."
        " The API key is read from TALLY_API_KEY (tally apikey create); docs/API.md, section MCP.",
    )
    user = add("user", run_user, "Manage dashboard users (add, list, remove, hash); passwords are stored hashed.")
    add_user_arguments(user)
    share = add("share", run_share, "Create, list and revoke signed, expiring, read-only dashboard share links.")
    add_share_arguments(share)
    changes = add("changes", run_changes, "Show who changed which setting of which site, when (the audit trail).")
    add_changes_arguments(changes)
    report = add("report", run_report, "Send the scheduled reports of notify.reports (e-mail, webhook), once each.")
    add_report_arguments(report)
    alerts = add("alerts", run_alerts, "Check the alert rules of notify.alerts and send new alerts; list incidents.")
    add_alerts_arguments(alerts)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    setup_logging()
    try:
        settings = load_settings()
        make_home_private(settings.home_dir)
        code = args.handler(args, settings)
    except (SetupError, SettingsError, ProcessError) as e:
        print(f"tally {args.command}: {e}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)
