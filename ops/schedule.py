"""``tally schedule``: run the configured recurring jobs (``schedule:`` in conf/tally.yaml).

Each job is a ``tally`` command line run as a subprocess when its 5-field cron expression
matches the current minute (UTC). Jobs run one after another in this process; a job that
was due while the scheduler was busy or asleep runs once when it wakes, and the runs
before it are logged as skipped rather than replayed in a burst.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import FrameType

from croniter import CroniterBadDateError, croniter  # type: ignore[import-untyped]  # untyped: wrapped below

from tally.log import kv
from tally.settings import PROJECT_ROOT, ScheduledJob, Settings, SettingsError

log = logging.getLogger("tally.ops.schedule")

Runner = Callable[[ScheduledJob], int]
Clock = Callable[[], datetime]
Sleep = Callable[[float], object]

MAX_SLEEP_SECONDS = 1.0  # a stop request or a clock jump is noticed within this long
MAX_COUNTED_SKIPS = 1000  # bounds the work of counting missed runs after a very long sleep
CRON_ADVICE = "use five fields, minute hour day-of-month month day-of-week (UTC), e.g. '30 2 * * *' for 02:30 daily"
MINUTE = timedelta(minutes=1)


class UnknownJobError(LookupError):
    """``--run NAME`` names no configured job; the message lists the configured ones."""

    def __str__(self) -> str:
        return str(self.args[0])  # LookupError would quote the message


@dataclass(frozen=True)
class JobRun:
    """One finished run: ``exit_code`` is None when the runner itself failed to run the job."""

    name: str
    scheduled_for: datetime
    exit_code: int | None
    seconds: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def utc_now() -> datetime:
    """The current time, timezone-aware in UTC."""
    return datetime.now(UTC)


def _utc(moment: datetime) -> datetime:
    assert moment.tzinfo is not None, f"scheduler times must be timezone-aware, got {moment!r}"
    return moment.astimezone(UTC)


def _minute_of(moment: datetime) -> datetime:
    return _utc(moment).replace(second=0, microsecond=0)


def _fires_after(cron: str, moment: datetime) -> datetime:
    """The first time strictly after ``moment`` at which ``cron`` fires."""
    found: datetime = croniter(cron, moment).get_next(datetime)
    return found


def _last_fire_until(cron: str, minute: datetime) -> datetime:
    """The latest time at or before the whole ``minute`` at which ``cron`` fires."""
    found: datetime = croniter(cron, minute + timedelta(seconds=1)).get_prev(datetime)
    return found


def validate_jobs(jobs: tuple[ScheduledJob, ...]) -> None:
    """Raise :class:`SettingsError` naming the first job whose name, cron or command cannot run."""
    seen: set[str] = set()
    for i, job in enumerate(jobs):
        if not job.name or job.name in seen:
            raise SettingsError(f"schedule[{i}].name: every job needs a name of its own; got {job.name!r}")
        seen.add(job.name)
        key = f"schedule[{i}].cron (job {job.name!r})"
        if len(job.cron.split()) != 5:
            raise SettingsError(f"{key}: {job.cron!r} is not a 5-field cron expression; {CRON_ADVICE}")
        try:
            _fires_after(job.cron, utc_now())
        except CroniterBadDateError as e:
            raise SettingsError(
                f"{key}: {job.cron!r} never fires (no date matches it, like 31 February); check day-of-month and month"
            ) from e
        except (ValueError, TypeError) as e:
            raise SettingsError(f"{key}: {job.cron!r} is not a valid cron expression ({e}); {CRON_ADVICE}") from e
        if not job.command or job.command[0] == "schedule":
            raise SettingsError(
                f"schedule[{i}].command (job {job.name!r}): {list(job.command)!r} is not a job to run; give a tally "
                "command line other than schedule, e.g. [backfill, --from, yesterday, --to, yesterday]"
            )


def tally_argv(job: ScheduledJob) -> list[str]:
    """The subprocess command line of a job: this interpreter running ``python -m tally``."""
    return [sys.executable, "-m", "tally", *job.command]


def run_subprocess(argv: list[str], *, cwd: str) -> int:
    """Run a command to completion with this process's stdout and stderr; its exit code."""
    return subprocess.run(argv, cwd=cwd, check=False).returncode


def run_tally_command(job: ScheduledJob) -> int:
    """The default runner: the job's ``tally`` command from the project root."""
    return run_subprocess(tally_argv(job), cwd=str(PROJECT_ROOT))


class Scheduler:
    """Decides which jobs are due and runs each once per matching minute."""

    def __init__(
        self,
        *,
        jobs: tuple[ScheduledJob, ...],
        run_command: Runner = run_tally_command,
        clock: Clock = utc_now,
        sleep: Sleep = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        validate_jobs(jobs)
        self.jobs = jobs
        self._run_command = run_command
        self._clock = clock
        self._sleep = sleep
        self._monotonic = monotonic
        self._handled_until: datetime | None = None  # the last minute run_pending has dealt with

    def now(self) -> datetime:
        """The scheduler's clock (UTC)."""
        return self._clock()

    def due(self, now: datetime) -> list[ScheduledJob]:
        """The jobs whose cron expression matches the minute of ``now``."""
        minute = _minute_of(now)
        return [job for job in self.jobs if _last_fire_until(job.cron, minute) == minute]

    def next_runs(self, now: datetime) -> dict[str, datetime]:
        """Each job's next fire time strictly after ``now`` (UTC)."""
        return {job.name: _fires_after(job.cron, _utc(now)) for job in self.jobs}

    def run_pending(self, now: datetime) -> list[JobRun]:
        """Run the jobs that fired since the last call, each once; log the runs that were missed."""
        minute = _minute_of(now)
        if self._handled_until is not None and minute <= self._handled_until:
            return []  # woken again in a minute already handled (or the clock stepped back)
        # The first call looks only at the current minute: starting up replays nothing.
        since = self._handled_until if self._handled_until is not None else minute - MINUTE
        self._handled_until = minute
        pending: list[tuple[ScheduledJob, datetime]] = []
        for job in self.jobs:
            latest = _last_fire_until(job.cron, minute)
            if latest > since:
                self._log_skipped(job, since, latest)
                pending.append((job, latest))
        return [self._run(job, scheduled_for) for job, scheduled_for in pending]

    def run_now(self, job_name: str) -> JobRun:
        """Run one configured job immediately, whatever its schedule (``tally schedule --run``)."""
        by_name = {job.name: job for job in self.jobs}
        if job_name not in by_name:
            known = ", ".join(by_name) or "none (add a schedule: section to conf/tally.yaml)"
            raise UnknownJobError(f"no scheduled job is named {job_name!r}; configured jobs: {known}")
        return self._run(by_name[job_name], self.now())

    def describe(self, now: datetime) -> list[str]:
        """A header and one aligned line per job: name, cron, next run (UTC) and command."""
        next_runs = self.next_runs(now)
        rows = [("NAME", "CRON", "NEXT RUN (UTC)", "COMMAND")] + [
            (job.name, job.cron, f"{next_runs[job.name]:%Y-%m-%d %H:%M}", shlex.join(["tally", *job.command]))
            for job in self.jobs
        ]
        widths = [max(len(row[col]) for row in rows) for col in range(3)]
        return [f"{n:<{widths[0]}}  {c:<{widths[1]}}  {t:<{widths[2]}}  {cmd}" for n, c, t, cmd in rows]

    def run_forever(self, stop: threading.Event) -> None:
        """Run due jobs until ``stop`` is set, sleeping in short steps until the next fire time."""
        log.info("scheduler started", extra=kv(jobs=len(self.jobs), next=self._next_summary(self.now())))
        while not stop.is_set():
            self.run_pending(self.now())
            now = self.now()
            upcoming = self.next_runs(now).values()
            wait = min(upcoming, default=now + MINUTE) - now
            # Short steps, not one long sleep: a stop request or a suspend/resume is noticed quickly.
            self._sleep(min(wait.total_seconds(), MAX_SLEEP_SECONDS))
        log.info("scheduler stopped")

    def _run(self, job: ScheduledJob, scheduled_for: datetime) -> JobRun:
        command = shlex.join(job.command)
        log.info("job started", extra=kv(job=job.name, scheduled=f"{scheduled_for:%Y-%m-%dT%H:%M}Z", command=command))
        started = self._monotonic()
        exit_code: int | None
        try:
            exit_code = self._run_command(job)
        except Exception:  # any runner failure is this job's failure; the scheduler carries on
            log.exception("job could not run", extra=kv(job=job.name, command=command))
            exit_code = None
        seconds = round(self._monotonic() - started, 3)
        if exit_code == 0:
            log.info("job finished", extra=kv(job=job.name, exit_code=exit_code, duration_s=seconds))
        else:
            log.error("job failed", extra=kv(job=job.name, exit_code=exit_code, duration_s=seconds))
        return JobRun(name=job.name, scheduled_for=scheduled_for, exit_code=exit_code, seconds=seconds)

    def _log_skipped(self, job: ScheduledJob, since: datetime, latest: datetime) -> None:
        skipped = 0
        first = fire = _fires_after(job.cron, since)
        while fire < latest and skipped < MAX_COUNTED_SKIPS:
            skipped += 1
            fire = _fires_after(job.cron, fire)
        if skipped:
            count = f"{skipped}+" if skipped == MAX_COUNTED_SKIPS else str(skipped)
            log.warning(
                "job runs skipped",
                extra=kv(
                    job=job.name,
                    skipped=count,
                    first=f"{first:%Y-%m-%dT%H:%M}Z",
                    running=f"{latest:%Y-%m-%dT%H:%M}Z",
                    reason="the scheduler was busy or asleep; only the latest missed run happens",
                ),
            )

    def _next_summary(self, now: datetime) -> str:
        return ",".join(f"{name}@{at:%Y-%m-%dT%H:%M}Z" for name, at in self.next_runs(now).items())


@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGTERM and SIGINT set ``stop``; the old handlers return after.

    The scheduler never kills a running job: it stops once that job ends. Ctrl-C on a terminal
    also reaches the job itself, which is in the same process group.
    """

    def request_stop(signum: int, frame: FrameType | None) -> None:
        # Only set the event: logging inside a signal handler can deadlock on the handler's lock.
        stop.set()

    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be installed from the main thread
        return
    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``tally schedule`` flags; without one it runs until SIGTERM or Ctrl-C."""
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--list", action="store_true", help="show each job with its cron, next run (UTC) and command")
    mode.add_argument("--run", metavar="NAME", help="run this job now, whatever its schedule, and exit")
    mode.add_argument("--once", action="store_true", help="run the jobs due this minute and exit (for system cron)")


def run(args: argparse.Namespace, settings: Settings, *, scheduler: Scheduler | None = None) -> int:
    """``tally schedule``: the exit code is 0 unless a job run by ``--run`` or ``--once`` failed."""
    scheduler = scheduler or Scheduler(jobs=settings.schedule)
    if args.list:
        lines = scheduler.describe(scheduler.now())
        print("\n".join(lines) if scheduler.jobs else "no jobs: add a schedule: section to conf/tally.yaml")
        return 0
    if args.run:
        try:
            return 0 if scheduler.run_now(args.run).ok else 1
        except UnknownJobError as e:
            print(f"tally schedule: {e}", file=sys.stderr)
            return 2
    if args.once:
        return 0 if all(done.ok for done in scheduler.run_pending(scheduler.now())) else 1
    if not scheduler.jobs:
        print("tally schedule: no jobs to run; add a schedule: section to conf/tally.yaml", file=sys.stderr)
        return 2
    stop = threading.Event()
    with stop_on_signals(stop):
        scheduler.run_forever(stop)
    return 0
