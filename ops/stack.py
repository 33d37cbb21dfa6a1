"""The whole stack on one machine: broker, ingest, archiver, streaming views, dashboard, traffic.

Each part is its own OS process, restartable on its own; all state lives in Kafka, Delta and
Spark checkpoints under ``<home>``. A watchdog process (:mod:`ops.watch`), started last and
stopped first, restarts a service that exits unexpectedly.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

import api
import archiver
import dashboard
import ingest
import jobs
import simulator
from ops import broker
from ops.processes import Running, Service, Supervisor, check_port
from tally.log import kv
from tally.settings import Settings

log = logging.getLogger("ops.stack")

ORDER = ("broker", "ingest", "archiver", "views", "dashboard", "api", "traffic")
WATCHDOG = "watchdog"


def http_ok(url: str) -> bool:
    """True when GET url answers 200 (False while the server is not up yet)."""
    import httpx  # here: every `tally` command imports this module, and only starting a stack asks

    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def ingest_url(settings: Settings) -> str:
    return f"http://{settings.ingest.host}:{settings.ingest.port}"


def dashboard_url(settings: Settings) -> str:
    return f"http://{settings.dashboard.host}:{settings.dashboard.port}"


def api_url(settings: Settings) -> str:
    return f"http://{settings.api.host}:{settings.api.port}"


def services(settings: Settings, env: dict[str, str] | None = None) -> dict[str, Service]:
    """Every service the stack can run, keyed by name, in start order.

    ``env`` is added to each child's environment (e.g. the TALLY_* overrides that produced
    ``settings``, when they are not in this process's own environment).
    """
    py = sys.executable
    found: dict[str, Service] = {}
    if settings.kafka.bundled:
        found["broker"] = Service(
            "broker",
            broker.broker_command(settings),
            port=settings.kafka.port,
            ready=lambda: broker.broker_answers(settings.kafka.servers, client_config=settings.kafka.client_config()),
            ready_timeout=90,
        )
    found["ingest"] = Service(
        "ingest",
        [py, "-m", ingest.__name__],
        port=settings.ingest.port,
        ready=lambda: http_ok(ingest_url(settings) + "/healthz"),
    )
    found["archiver"] = Service(
        "archiver",
        [py, "-m", archiver.__name__],
        port=settings.archiver.metrics_port or None,
        nice=settings.archiver.nice,
        idle=settings.archiver.idle_priority,
    )
    found["views"] = Service(
        "views",
        [py, "-m", jobs.__name__],
        port=settings.spark.metrics_port or None,
        nice=settings.spark.nice,
        idle=settings.spark.idle_priority,
    )
    found["dashboard"] = Service(
        "dashboard",
        [
            py,
            "-m",
            "streamlit",
            "run",
            str(Path(dashboard.__file__).parent / "server.py"),  # st.App: the page plus the login routes
            "--server.address",
            settings.dashboard.host,
            "--server.port",
            str(settings.dashboard.port),
            "--server.headless",
            "true",
            "--browser.gatherUsageStats",
            "false",
            "--client.toolbarMode",
            "viewer",
            # No file watcher: a served page does not rerun when its source changes, and Streamlit does
            # not walk every imported module's path after each script run to watch it (two thirds of
            # the dashboard process's Python time on a warm page load; docs/BENCHMARKS.md).
            "--server.fileWatcherType",
            "none",
        ],
        port=settings.dashboard.port,
        ready=lambda: http_ok(dashboard_url(settings) + "/_stcore/health"),
    )
    found["api"] = Service(
        "api",
        [py, "-m", api.__name__],
        port=settings.api.port,
        ready=lambda: http_ok(api_url(settings) + "/healthz"),
    )
    found["traffic"] = Service("traffic", [py, "-m", simulator.__name__])
    return {name: dataclasses.replace(service, env=env or {}) for name, service in found.items()}


def watchdog_service(env: dict[str, str] | None = None) -> Service:
    """The watchdog that restarts crashed services (``python -m ops.watch``)."""
    return Service(WATCHDOG, [sys.executable, "-m", "ops.watch"], env=env or {})


@dataclass(frozen=True)
class ServiceStatus:
    """One row of ``tally status``. ``state``: running, stopped, crashed (the watchdog restarts
    it after its backoff) or failed (the watchdog gave up: ``gave_up`` says why)."""

    name: str
    running: Running | None
    port: int | None
    log: Path
    state: str = "stopped"
    restarts: int = 0
    gave_up: str = ""


class Stack:
    """Brings the configured services up and down through one :class:`Supervisor`."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.supervisor = Supervisor(settings.home_dir)

    def up(self, *, traffic: bool) -> None:
        """Start every service that is not running yet (idempotent), in dependency order."""
        table = services(self.settings)
        starting = [name for name in ORDER if name in table and (name != "traffic" or traffic)]
        # Every port first: a taken one is said before anything starts, not after the broker is up.
        for name in starting:
            if self.supervisor.find(name) is None:
                check_port(table[name])
        if "broker" in table:
            broker.ensure_formatted(self.settings)
        for name in starting:
            already = self.supervisor.find(name)
            running = self.supervisor.start(table[name])
            verb = "already running" if already else "started"
            log.info(f"{name} {verb}", extra=kv(pid=running.pid, port=running.port, log=str(running.log)))
            if name == "broker" or (name == "ingest" and not self.settings.kafka.bundled):
                broker.wait_until_ready(self.settings.kafka.servers, client_config=self.settings.kafka.client_config())
                broker.ensure_topics(self.settings)
        already = self.supervisor.find(WATCHDOG)
        watchdog = self.supervisor.start(watchdog_service())
        verb = "already running" if already else "started"
        log.info(f"{WATCHDOG} {verb}", extra=kv(pid=watchdog.pid, log=str(watchdog.log)))

    def down(self) -> list[str]:
        """Stop the watchdog (so it does not restart what is being stopped), then every service in
        reverse order; return the names of the services stopped."""
        if self.supervisor.stop(WATCHDOG):
            log.info(f"{WATCHDOG} stopped")
        stopped = [name for name in reversed(ORDER) if self.supervisor.stop(name)]
        for name in stopped:
            log.info(f"{name} stopped")
        return stopped

    def status(self) -> list[ServiceStatus]:
        """What runs, with which PID, on which port, restarted how often; the watchdog last."""
        table = services(self.settings) | {WATCHDOG: watchdog_service()}
        return [self._status(name, table[name].port) for name in (*ORDER, WATCHDOG) if name in table]

    def _status(self, name: str, port: int | None) -> ServiceStatus:
        running = self.supervisor.find(name)
        record = self.supervisor.record(name)
        log_path = self.supervisor.log_dir / f"{name}.log"
        if record is None:
            return ServiceStatus(name, None, port, log_path)
        state = "running" if running else ("failed" if record.gave_up else "crashed")
        return ServiceStatus(name, running, port, log_path, state, record.restarts, record.gave_up)


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def stack_env(home: Path) -> dict[str, str]:
    """Environment for an isolated Tally: its own home and free ports."""
    kafka, controller, ingest, dashboard, archiver_metrics, views_metrics, ingest_metrics, stats_api = free_ports(8)
    return {
        "TALLY_ENV": "test",
        "TALLY_HOME": str(home),
        "TALLY_KAFKA__PORT": str(kafka),
        "TALLY_KAFKA__CONTROLLER_PORT": str(controller),
        "TALLY_INGEST__PORT": str(ingest),
        "TALLY_INGEST__METRICS_PORT": str(ingest_metrics),
        "TALLY_DASHBOARD__PORT": str(dashboard),
        "TALLY_ARCHIVER__METRICS_PORT": str(archiver_metrics),
        "TALLY_SPARK__METRICS_PORT": str(views_metrics),
        "TALLY_API__PORT": str(stats_api),
    }
