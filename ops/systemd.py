"""``tally systemd``: unit files that run the stack under systemd on a production host.

There systemd is the supervisor: ``Restart=always`` brings a crashed service back after
``RestartSec``, and ``StartLimitIntervalSec``/``StartLimitBurst`` stop a service that keeps failing
at start (``systemctl status`` then says so). Each unit runs the same command ``tally up`` runs
(:func:`ops.stack.services`), with the same home and conf, so the two ways of running Tally never
differ in what they start. The synthetic traffic generator has no unit: it is for demos.

The consumers are ordered after the broker with ``After=`` and pulled in with ``Wants=``, not
``Requires=``: with ``Requires=``, stopping or restarting the broker by hand would stop ingest,
which must keep answering into its spool while the broker is away, and would leave the archiver
and the views job stopped after the broker is started again, the very loss this file prevents.
``python -m ops.systemd`` holds the broker's start hooks (format once; create the topics).
"""

from __future__ import annotations

import argparse
import getpass
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from ops import broker
from ops.processes import Service
from ops.stack import services
from tally.log import setup_logging
from tally.settings import ENV_PREFIX, PROJECT_ROOT, Settings, load_settings

UNIT_PREFIX = "tally-"
TARGET = "tally.target"
SERVICES = ("broker", "ingest", "archiver", "views", "dashboard", "api")  # start order; no synthetic traffic
AFTER_BROKER = ("ingest", "archiver", "views")
RESTART_SEC = 5  # systemd's restart delay; the start limit below ends a crash loop
START_LIMIT_INTERVAL_SEC = 300
START_LIMIT_BURST = 5
DEFAULT_ENV_FILE = Path("/etc/tally/tally.env")
DESCRIPTIONS = {
    "broker": "Tally Kafka broker (bundled, KRaft)",
    "ingest": "Tally ingest endpoint (beacons to Kafka, spool while Kafka is away)",
    "archiver": "Tally archiver (Kafka to raw Delta tables)",
    "views": "Tally streaming views (Spark, raw events to aggregates)",
    "dashboard": "Tally dashboard (Streamlit)",
    "api": "Tally Stats API (Plausible v2 compatible)",
}
PLACED_IN_UNITS = ("TALLY_HOME", "TALLY_CONF_DIR", "TALLY_ENV")  # every other TALLY_* goes to the env file


@dataclass(frozen=True)
class UnitFile:
    """One file to install under /etc/systemd/system."""

    name: str
    text: str


def unit_name(service: str) -> str:
    return f"{UNIT_PREFIX}{service}.service"


def exec_line(command: list[str]) -> str:
    """A command line as systemd parses ``ExecStart=``: quoted where needed, ``%`` and ``$`` escaped."""

    def quote(arg: str) -> str:
        arg = arg.replace("%", "%%").replace("$", "$$")
        if re.search(r'[\s"\'\\;]', arg) or not arg:
            return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return arg

    return " ".join(quote(a) for a in command)


def unit_environment(settings: Settings) -> dict[str, str]:
    """What every unit's ``Environment=`` sets: the home and conf this shell's settings come from."""
    env = {
        "TALLY_HOME": str(settings.home_dir),
        "TALLY_CONF_DIR": os.environ.get("TALLY_CONF_DIR", str(PROJECT_ROOT / "conf")),
    }
    if os.environ.get("TALLY_ENV"):
        env["TALLY_ENV"] = os.environ["TALLY_ENV"]
    return env


def env_file_text() -> str:
    """The other TALLY_* overrides of this shell (ports, passwords…), for an ``EnvironmentFile=`` of mode 0600."""
    lines = [f"{k}={shlex.quote(v)}" for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIX)]
    kept = [line for line in lines if line.split("=", 1)[0] not in PLACED_IN_UNITS]
    return "# TALLY_* overrides for the Tally units (written by `tally systemd`); keep this file 0600\n" + "".join(
        f"{line}\n" for line in kept
    )


def service_unit(
    service: Service,
    *,
    description: str,
    environment: dict[str, str],
    env_file: Path,
    user: str,
    after_broker: bool,
    python: str,
) -> str:
    """The text of one ``tally-<name>.service``."""
    wants = ["network-online.target", *([unit_name("broker")] if after_broker else [])]
    lines = [
        "[Unit]",
        f"Description={description}",
        f"Wants={' '.join(wants)}",
        f"After={' '.join(wants)}",
        f"PartOf={TARGET}",
        f"StartLimitIntervalSec={START_LIMIT_INTERVAL_SEC}",
        f"StartLimitBurst={START_LIMIT_BURST}",
        "",
        "[Service]",
        "Type=simple",
        f"User={user}",
        f"WorkingDirectory={PROJECT_ROOT}",
        *(f"Environment={exec_line([f'{k}={v}'])}" for k, v in environment.items()),
        f"EnvironmentFile=-{env_file}",
    ]
    if service.name == "broker":
        lines += [
            f"ExecStartPre={exec_line([python, '-m', 'ops.systemd', 'prepare-broker'])}",
            f"ExecStartPost={exec_line([python, '-m', 'ops.systemd', 'broker-ready'])}",
            "LimitNOFILE=65536",
            "TimeoutStartSec=180",
        ]
    if service.nice:
        lines.append(f"Nice={service.nice}")  # systemd's own niceness, as `tally up` starts it
    if service.idle:
        lines.append("CPUSchedulingPolicy=idle")  # SCHED_IDLE, as `tally up` starts it
    lines += [
        f"ExecStart={exec_line(service.command)}",
        "Restart=always",
        f"RestartSec={RESTART_SEC}",
        "TimeoutStopSec=30",
        "",
        "[Install]",
        f"WantedBy={TARGET}",
        "",
    ]
    return "\n".join(lines)


def target_unit(names: list[str]) -> str:
    """``tally.target``: enabling it starts every Tally unit at boot."""
    units = " ".join(unit_name(n) for n in names)
    lines = ["[Unit]", "Description=Tally web analytics", f"Wants={units}", f"After={units}", ""]
    return "\n".join([*lines, "[Install]", "WantedBy=multi-user.target", ""])


def unit_files(settings: Settings, *, user: str, env_file: Path = DEFAULT_ENV_FILE) -> list[UnitFile]:
    """One unit per service of the configured stack (no broker unit when Kafka is external), and the target."""
    table = services(settings)
    names = [n for n in SERVICES if n in table]
    environment = unit_environment(settings)
    python = table["ingest"].command[0]  # the interpreter `tally up` runs the apps with: the venv's
    files = [
        UnitFile(
            unit_name(n),
            service_unit(
                table[n],
                description=DESCRIPTIONS[n],
                environment=environment,
                env_file=env_file,
                user=user,
                after_broker=n in AFTER_BROKER and "broker" in table,
                python=python,
            ),
        )
        for n in names
    ]
    return [*files, UnitFile(TARGET, target_unit(names))]


def write_units(settings: Settings, out: Path, *, user: str, env_file: Path = DEFAULT_ENV_FILE) -> list[Path]:
    """Write the units and ``tally.env`` (0600) into ``out``; return the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for unit in unit_files(settings, user=user, env_file=env_file):
        path = out / unit.name
        path.write_text(unit.text)
        written.append(path)
    env_path = out / "tally.env"
    env_path.touch(mode=0o600)
    env_path.chmod(0o600)
    env_path.write_text(env_file_text())
    return [*written, env_path]


def install_hint(out: Path, env_file: Path = DEFAULT_ENV_FILE) -> str:
    """What the operator runs next (as root), in order."""
    return (
        f"install them (as root):\n"
        f"  install -D -m 600 {out / 'tally.env'} {env_file}\n"
        f"  cp {out}/{UNIT_PREFIX}*.service {out / TARGET} /etc/systemd/system/\n"
        f"  systemctl daemon-reload\n"
        f"  tally down   # if `tally up` runs this stack now: one supervisor at a time\n"
        f"  systemctl enable --now {TARGET}\n"
        f"check them with: systemctl status '{UNIT_PREFIX}*'   logs: journalctl -u {unit_name('archiver')}"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``tally systemd``."""
    parser.add_argument("--out", type=Path, required=True, help="directory to write the unit files into")
    parser.add_argument("--user", default=getpass.getuser(), help="the user the services run as (default: you)")
    parser.add_argument(
        "--env-file",
        type=Path,
        default=DEFAULT_ENV_FILE,
        help=f"where the units read the other TALLY_* overrides from (default {DEFAULT_ENV_FILE})",
    )


def run(args: argparse.Namespace, settings: Settings) -> int:
    """``tally systemd``: write the units, then say how to install them."""
    written = write_units(settings, args.out, user=args.user, env_file=args.env_file)
    print("wrote " + ", ".join(p.name for p in written) + f" to {args.out}")
    print(install_hint(args.out, args.env_file))
    return 0


def main(argv: list[str] | None = None) -> None:
    """The broker unit's start hooks (``ExecStartPre``/``ExecStartPost``)."""
    parser = argparse.ArgumentParser(
        prog="python -m ops.systemd", description="Start hooks of the tally-broker systemd unit."
    )
    sub = parser.add_subparsers(dest="hook", required=True, metavar="HOOK")
    sub.add_parser("prepare-broker", help="format the broker's storage once (a no-op after the first time)")
    sub.add_parser("broker-ready", help="wait until the broker answers, then create Tally's topics if missing")
    args = parser.parse_args(argv)
    setup_logging()
    settings = load_settings()
    if args.hook == "prepare-broker":
        broker.ensure_formatted(settings)
    else:
        broker.wait_until_ready(settings.kafka.servers, timeout=150, client_config=settings.kafka.client_config())
        broker.ensure_topics(settings)


if __name__ == "__main__":
    main()
