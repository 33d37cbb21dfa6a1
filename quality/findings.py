"""What quality finds: the outcome of one suite check, and one audit comparison, named for a reader.

Pure domain code, shared by the suites, the two reconciliations (``quality.kafka_raw``,
``quality.raw_views``), the reports and the result tables.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

# The three reconciliations of the audit, in report order.
KAFKA_RAW = "kafka = raw"
RAW_VIEWS = "raw = views"
SKETCHES = "sketches"
CHECKS = (KAFKA_RAW, RAW_VIEWS, SKETCHES)

SHOWN = 3  # ids or offsets named per line; the counts are always complete


@dataclass(frozen=True)
class CheckResult:
    """One check of one table partition: what was expected, and what was found if it failed."""

    table: str
    partition_date: dt.date
    suite: str
    check: str  # readable, e.g. "event_id unique"
    expectation: str  # the GX expectation type (or "delta schema")
    column: str | None
    success: bool
    unexpected_count: int | None
    observed: str  # JSON: the observed value, or a few unexpected values


@dataclass(frozen=True)
class Finding:
    """One comparison: ``expected`` (from the side that is the record) against ``actual``."""

    check: str  # KAFKA_RAW, RAW_VIEWS or SKETCHES
    name: str  # what was compared, e.g. "lost events", "page views", "visitors"
    subject: str  # the table (or topic) that holds the actual value
    date: dt.date | None  # None: not tied to one date (e.g. Kafka offsets)
    expected: int | None
    actual: int | None
    ok: bool
    message: str
    hint: str = ""  # what to do about it, for a mismatch


def examples(values: Iterable[object], total: int | None = None) -> str:
    """A few of ``values`` for a message, e.g. ``"a1, b2, c3 and 4 more"``."""
    items = [str(v) for v in values]
    total = len(items) if total is None else total
    shown = ", ".join(items[:SHOWN])
    return shown if total <= SHOWN else f"{shown} and {total - SHOWN:,} more"


def backfill_hint(day: dt.date) -> str:
    return f"recompute the views of that date: tally backfill --from {day} --to {day}"


def mismatches(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if not f.ok]
