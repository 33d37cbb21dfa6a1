"""``tally``: the operator's command line. Every command has ``--help``."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable

from tally.bootstrap import SetupError, setup
from tally.log import setup_logging
from tally.processes import ProcessError
from tally.settings import Settings, SettingsError, load_settings
from tally.stack import Stack, dashboard_url, ingest_url

log = logging.getLogger("tally")


def cmd_setup(args: argparse.Namespace, settings: Settings) -> int:
    setup()
    print("setup complete: Java ok, Kafka and Spark jars resolved from Maven Central")
    return 0


def cmd_up(args: argparse.Namespace, settings: Settings) -> int:
    setup()
    Stack(settings).up(traffic=args.traffic)
    print(
        f"\nTally is up.\n  dashboard: {dashboard_url(settings)}\n  ingest:    {ingest_url(settings)}/api/event"
        f'\n  snippet:   <script defer data-site="{settings.traffic.site_id}" src="{ingest_url(settings)}/t.js">'
        "</script>\n  stop with: tally down"
    )
    return 0


def cmd_down(args: argparse.Namespace, settings: Settings) -> int:
    stopped = Stack(settings).down()
    print("stopped: " + (", ".join(stopped) if stopped else "nothing was running"))
    return 0


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    rows = Stack(settings).status()
    print(f"{'SERVICE':<10} {'STATE':<8} {'PID':>7}  {'PORT':>5}  LOG")
    for row in rows:
        state = "running" if row.running else "stopped"
        pid = str(row.running.pid) if row.running else "-"
        port = str(row.port) if row.port else "-"
        print(f"{row.name:<10} {state:<8} {pid:>7}  {port:>5}  {row.log}")
    print(f"\nkafka: {settings.kafka.servers}  warehouse: {settings.warehouse_uri}")
    return 0


def cmd_traffic(args: argparse.Namespace, settings: Settings) -> int:
    from traffic.generator import run_traffic

    sent = run_traffic(
        settings,
        rate=args.rate or settings.traffic.rate,
        duration=args.duration,
        target=args.target or ingest_url(settings),
    )
    print(f"sent {sent.accepted} accepted beacons ({sent.failed} failed) to the ingest endpoint")
    return 0 if sent.failed == 0 else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tally", description="Tally: self-hosted, privacy-first web analytics.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, handler: Callable[[argparse.Namespace, Settings], int], text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=text, description=text)
        p.set_defaults(handler=handler)
        return p

    add("setup", cmd_setup, "Check Java and Maven; fetch the Kafka broker and Spark package jars from Maven Central.")
    up = add("up", cmd_up, "Start the stack (broker, ingest, archiver, streaming views, dashboard); idempotent.")
    up.add_argument("--traffic", action="store_true", help="also run the synthetic traffic generator")
    add("down", cmd_down, "Stop every process `tally up` started (and only those).")
    add("status", cmd_status, "Show which services run, with PID, port and log file.")
    traffic = add("traffic", cmd_traffic, "Send realistic synthetic beacons to the ingest endpoint.")
    traffic.add_argument("--rate", type=float, help="beacons per second (default: traffic.rate)")
    traffic.add_argument("--duration", type=float, default=0, help="seconds to run; 0 = until Ctrl-C")
    traffic.add_argument("--target", help="ingest base URL (default: the configured ingest)")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    setup_logging()
    try:
        settings = load_settings()
        code = args.handler(args, settings)
    except (SetupError, SettingsError, ProcessError) as e:
        print(f"tally {args.command}: {e}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        code = 130
    sys.exit(code)
