"""``tally check``: run the suites over table partitions, record the results, quarantine failures.

Each (table, date) partition is read with delta-rs and validated on its own. Every check's
outcome goes to ``quality.results``; the partition's verdict goes to ``quality.partitions``
(quarantined if any check failed, released when a later run passes it). A quarantined
partition also logs one alert line and bumps ``tally_quality_failed_checks_total``.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client import Counter
from tqdm import tqdm

from quality.contracts import contracts
from quality.findings import CheckResult
from quality.quarantine import record_statuses
from quality.store import append_results, read_partition
from quality.suites import SuiteRunner, schema_result
from tally.log import kv
from tally.quarantine import PartitionStatus
from tally.settings import Settings

log = logging.getLogger("tally.quality.checks")

FAILED_CHECKS = Counter("tally_quality_failed_checks", "Data-quality checks that failed", ["table", "check"])
QUARANTINED = Counter("tally_quality_quarantined_partitions", "Partitions a check run quarantined", ["table"])

CHECKER = "suite"


@dataclass(frozen=True)
class PartitionOutcome:
    """The suites' results on one partition."""

    table: str
    partition_date: dt.date
    rows: int
    results: tuple[CheckResult, ...]

    @property
    def failed(self) -> tuple[CheckResult, ...]:
        return tuple(r for r in self.results if not r.success)


@dataclass(frozen=True)
class CheckRun:
    run_id: str
    checked_at: dt.datetime
    outcomes: tuple[PartitionOutcome, ...]
    missing_tables: tuple[str, ...]  # not written yet: nothing to check

    @property
    def ok(self) -> bool:
        return not any(o.failed for o in self.outcomes)


def run_checks(
    settings: Settings,
    *,
    dates: Sequence[dt.date],
    tables: Sequence[str] | None = None,
    now: dt.datetime | None = None,
    runner: SuiteRunner | None = None,
    record: bool = True,
    progress: bool = False,
) -> CheckRun:
    """Validate each (table, date) partition; record results and verdicts unless ``record`` is off."""
    now = now or dt.datetime.now(dt.UTC)
    every = contracts(settings.quality)
    unknown = [t for t in tables or () if t not in every]
    assert not unknown, f"no contract for {unknown}; known tables: {list(every)}"
    runner = runner or SuiteRunner(settings.quality)
    outcomes: list[PartitionOutcome] = []
    missing: list[str] = []
    bar = tqdm(total=len(tables or every) * len(dates), desc="check", unit="partition", disable=not progress)
    for table in tables or list(every):
        contract = every[table]
        for day in dates:
            bar.set_postfix_str(f"{table} {day}")
            bar.update()
            partition = read_partition(settings, contract, day)
            if partition is None:
                missing.append(table)
                break
            results = runner.validate(contract, day, partition.frame, now=now)
            results.append(schema_result(contract, day, partition.delta_types))
            outcomes.append(PartitionOutcome(table, day, len(partition.frame), tuple(results)))
    bar.close()
    run = CheckRun(uuid.uuid4().hex, now, tuple(outcomes), tuple(missing))
    if record:
        _record(settings, run)
    return run


def _record(settings: Settings, run: CheckRun) -> None:
    append_results(settings, run.run_id, run.checked_at, [r for o in run.outcomes for r in o.results])
    record_statuses(
        settings,
        [
            PartitionStatus(
                table=o.table,
                partition_date=o.partition_date,
                checker=CHECKER,
                quarantined=bool(o.failed),
                run_id=run.run_id,
                checked_at=run.checked_at,
                failed_checks=tuple(r.check for r in o.failed),
            )
            for o in run.outcomes
        ],
    )
    for o in run.outcomes:
        if not o.failed:
            continue
        QUARANTINED.labels(o.table).inc()
        for r in o.failed:
            FAILED_CHECKS.labels(o.table, r.check).inc()
        log.error(
            "quality alert: partition quarantined",
            extra=kv(
                table=o.table,
                date=str(o.partition_date),
                failed=len(o.failed),
                checks="; ".join(r.check for r in o.failed),
                run_id=run.run_id,
            ),
        )
    log.info(
        "quality checks recorded",
        extra=kv(
            run_id=run.run_id, partitions=len(run.outcomes), quarantined=sum(bool(o.failed) for o in run.outcomes)
        ),
    )


def render(run: CheckRun) -> str:
    """The readable report of a check run: one line per partition, the failed checks under it."""
    lines = [f"tally check  run {run.run_id}  {run.checked_at:%Y-%m-%d %H:%M} UTC"]
    for o in run.outcomes:
        verdict = "FAIL" if o.failed else "ok  "
        passed = len(o.results) - len(o.failed)
        suffix = "  quarantined" if o.failed else ""
        lines.append(
            f"  {verdict}  {o.table:<18} {o.partition_date}  {o.rows:>9,} rows  {passed}/{len(o.results)}{suffix}"
        )
        for r in o.failed:
            count = f"{r.unexpected_count} rows: " if r.unexpected_count else ""
            lines.append(f"          - {r.check} ({r.expectation}): {count}{r.observed}")
    for table in run.missing_tables:
        lines.append(f"  --    {table:<18} not written yet: nothing to check")
    failed = [o for o in run.outcomes if o.failed]
    if failed:
        lines.append(
            f"{len(failed)} partition(s) quarantined; results in quality.results, verdicts in quality.partitions"
        )
    else:
        lines.append(f"all {len(run.outcomes)} partition(s) passed")
    return "\n".join(lines)
