"""The watchdog ``tally up`` leaves running: it restarts a service that exits unexpectedly.

``python -m ops.watch`` polls the PID files of ``<home>/run`` once a second. A PID file whose
process is gone means a crash (``tally down`` and every other stop remove the file before they
signal, see :mod:`ops.processes`), so the service is started again after the backoff of
:class:`ops.watch_policy.RestartPolicy`; after repeated fast crashes the watchdog gives up on that
service with an error line in ``<home>/logs/watchdog.log`` and ``failed`` in ``tally status``. Each
pass also rotates the service logs past ``logs.max_mib`` (:mod:`ops.log_rotation`).
Restarts and give-ups are written into the PID file, so they survive a restart of the watchdog.
On a production host, systemd does this job instead (``tally systemd``).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from types import FrameType

from ops.log_rotation import rotate_logs
from ops.processes import ProcessError, Record, Service, Supervisor, alive
from ops.stack import WATCHDOG, services
from ops.watch_policy import RestartPolicy
from tally.log import kv, setup_logging
from tally.settings import LogSettings, load_settings

log = logging.getLogger("ops.watch")

POLL_SECONDS = 1.0  # how soon a crash is noticed; a poll reads a few small files


class Watchdog:
    """Restarts the crashed services of one home, with backoff, until told to stop."""

    def __init__(
        self,
        supervisor: Supervisor,
        table: Mapping[str, Service],
        *,
        policy: RestartPolicy | None = None,
        clock: Callable[[], float] = time.time,
        logs: LogSettings | None = None,
    ) -> None:
        self.supervisor = supervisor
        self.table = table
        self.policy = policy or RestartPolicy()
        self.clock = clock
        self.logs = logs or LogSettings()

    def check(self) -> None:
        """One pass over every started service: note new crashes, restart those whose backoff is over."""
        for name in self.supervisor.recorded():
            if name == WATCHDOG or name not in self.table:
                continue
            record = self.supervisor.record(name)
            if record is None or record.gave_up or alive(record):
                continue
            if record.restart_at is None:
                self._crashed(name, record, f"exited unexpectedly (exit code {_exit_code(record.pid)})")
            elif self.clock() >= record.restart_at:
                self._restart(name, record)

    def _crashed(self, name: str, record: Record, what: str) -> None:
        now = self.clock()
        decision = self.policy.on_crash(record.crashes, now)
        with self.supervisor.lock(name):
            if self.supervisor.record(name) != record:
                return  # stopped or started by someone else meanwhile: not ours to handle
            if decision.give_up:
                self.supervisor.write(name, replace(record, crashes=decision.recent, gave_up=decision.give_up))
            else:
                self.supervisor.write(name, replace(record, crashes=decision.recent, restart_at=now + decision.delay))
        fields: dict[str, object] = {"service": name, "pid": record.pid, "crashes": len(decision.recent)}
        if decision.give_up:
            hint = f"fix the cause (see {record.log}), then run `tally up` to start {name} again"
            log.error(f"{name} {what}; {decision.give_up}, not restarting it", extra=kv(**fields, hint=hint))
        else:
            log.warning(f"{name} {what}; restarting it", extra=kv(**fields, restart_in_s=decision.delay))

    def _restart(self, name: str, crashed: Record) -> None:
        try:
            running = self.supervisor.restart(self.table[name], crashed)
        except (ProcessError, OSError) as e:
            failed = replace(crashed, restart_at=None)
            with self.supervisor.lock(name):
                if self.supervisor.record(name) == crashed:
                    self.supervisor.write(name, failed)
            self._crashed(name, failed, f"could not be restarted ({e})")
            return
        if running is not None:
            log.info(f"{name} restarted", extra=kv(service=name, pid=running.pid, restarts=crashed.restarts + 1))

    def run(self, stop: threading.Event, interval: float = POLL_SECONDS) -> None:
        """Check every ``interval`` seconds until ``stop`` is set; an error in one pass is logged, not fatal."""
        while not stop.is_set():
            try:
                self.check()
                rotate_logs(self.supervisor.log_dir, max_bytes=self.logs.max_mib * 2**20, keep=self.logs.keep)
            except Exception:  # the watchdog must outlive a bad pass (a half-deleted file, a full disk)
                log.exception("watchdog pass failed; trying again", extra=kv(interval_s=interval))
            stop.wait(interval)


def _exit_code(pid: int) -> int | str:
    """The exit code of a process the watchdog started itself (and reaps now); "unknown" otherwise."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return "unknown"
    return os.waitstatus_to_exitcode(status) if done else "unknown"


def main(argv: list[str] | None = None) -> None:
    """Run the watchdog of the configured home until SIGTERM or SIGINT."""
    parser = argparse.ArgumentParser(
        prog="python -m ops.watch",
        description="Restart Tally services that exit unexpectedly, with backoff; started by `tally up`, "
        "stopped by `tally down`. Settings come from conf/ and TALLY_* variables, as for `tally`.",
    )
    parser.add_argument("--interval", type=float, default=POLL_SECONDS, help="seconds between checks (default 1)")
    args = parser.parse_args(argv)
    setup_logging()
    settings = load_settings()
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    policy = RestartPolicy()
    log.info(
        "watchdog started",
        extra=kv(home=str(settings.home_dir), interval_s=args.interval, give_up_after=policy.max_crashes),
    )
    watchdog = Watchdog(Supervisor(settings.home_dir), services(settings), policy=policy, logs=settings.logs)
    watchdog.run(stop, args.interval)
    log.info("watchdog stopped")


if __name__ == "__main__":
    main()
