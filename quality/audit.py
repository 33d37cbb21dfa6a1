"""``tally audit``: reconcile Kafka, ``raw.pageviews`` and the views for a range of event dates.

Trust, but verify. Three reconciliations, each comparison a named finding:

1. **kafka = raw** (``quality.kafka_raw``): event ids per date, and every Kafka offset accounted for;
2. **raw = views** (``quality.raw_views``): non-bot page views per date in every traffic grain,
   in visits, and no page view outside a visit; (``quality.raw_props``) non-bot custom events per
   date, event name, property key and value in ``agg.props_1d``, and no row without such an event;
   (``quality.raw_vitals``) non-bot vitals beacons, their band counts and scroll depths per date in
   ``agg.vitals_1h``;
3. **sketches**: the daily HLL visitors estimates (``agg.traffic_1d``, ``agg.props_1d``) within
   their 2-sigma bounds of the exact counts.

The report is printed, recorded in ``quality.audits`` (one row per finding), and every
(table, date) with a mismatch is quarantined in ``quality.partitions`` (checker ``audit``) until
an audit passes it again. Kafka is read in a bounded slice (``quality.kafka_log``).
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections import defaultdict
from dataclasses import dataclass

import pandas as pd
from prometheus_client import Counter

from quality import raw_vitals
from quality.findings import CHECKS, Finding, mismatches
from quality.kafka_log import scan_topic
from quality.kafka_raw import KafkaScan, reconcile_kafka_raw
from quality.quarantine import record_statuses
from quality.raw_props import PropsInput, reconcile_raw_props
from quality.raw_views import TRAFFIC_TABLES, ViewsInput, reconcile_raw_views
from quality.raw_vitals import VitalsInput, reconcile_raw_vitals
from quality.store import append, read_rows
from query.open_visits import Tables, open_event_ids, tail_of
from tally.log import kv
from tally.quarantine import PartitionStatus
from tally.settings import Settings
from tally.storage import arrow_dataset, find_table, recorded_offset
from tally.table_schemas import QUALITY_AUDITS_SCHEMA
from tally.tables import (
    EVENTS,
    LATE_EVENTS,
    PROPS_1D,
    QUALITY_AUDITS,
    RAW_PAGEVIEWS,
    RAW_REJECTED,
    SESSIONS,
    TRAFFIC_1D,
    TRAFFIC_1M,
    VISITS_1D,
    VITALS_1H,
)

log = logging.getLogger("tally.quality.audit")

MISMATCHES = Counter("tally_quality_audit_mismatches", "Audit comparisons that did not match", ["check", "name"])

RAW_COLUMNS = (
    *("event_id", "event_date", "type", "is_bot", "site_id", "visitor_id", "event_time", "ts_received"),
    *("name", "props"),  # for agg.props_1d
    *raw_vitals.RAW_COLUMNS,  # for agg.vitals_1h
)
PROPS_COLUMNS = ("site_id", "event_date", "name", "key", "value", "events", "visitors_sketch")
DAY = dt.timedelta(days=1)
SESSIONS_TABLE, LATE = SESSIONS.table, LATE_EVENTS.table


class AuditError(Exception):
    """An audit that cannot run; the message says what to do."""


@dataclass(frozen=True)
class AuditReport:
    run_id: str
    audited_at: dt.datetime
    start: dt.date
    end: dt.date
    site_id: str | None
    kafka: str  # what was read from Kafka, and its bounds
    findings: tuple[Finding, ...]

    @property
    def ok(self) -> bool:
        return not mismatches(self.findings)

    @property
    def checker(self) -> str:
        return "audit" if self.site_id is None else f"audit:{self.site_id}"


def _dates(start: dt.date, end: dt.date) -> tuple[dt.date, ...]:
    return tuple(start + dt.timedelta(days=i) for i in range((end - start).days + 1))


def _site(site_id: str | None) -> dict[str, object]:
    return {} if site_id is None else {"site_id": site_id}


def _kafka_scan(settings: Settings, since: dt.datetime) -> KafkaScan:
    ranges, messages = scan_topic(settings, since=since)
    topic = settings.kafka.pageviews_topic
    archived = {p: recorded_offset(settings, RAW_PAGEVIEWS, topic, p) for p in ranges}
    return KafkaScan(topic, ranges, messages, archived)


def in_flight_span(settings: Settings) -> dt.timedelta:
    """How long an archived event may take to reach every view the audit compares: a micro-batch
    (of the props and vitals views, the slower trigger) and a roll-up of the hours and days, twice over."""
    spark = settings.spark
    batch = max(spark.trigger_seconds, spark.sessions_trigger_seconds)  # the props and vitals views: the latter
    return 2 * dt.timedelta(seconds=batch + spark.hours_rollup_seconds)


def open_visit_event_ids(settings: Settings, events: pd.DataFrame) -> frozenset[str]:
    """The ids of the archived events of visits still open, of every site the events hold."""
    raw = find_table(settings, RAW_PAGEVIEWS)
    if raw is None or events.empty:
        return frozenset()
    views = (find_table(settings, EVENTS.table), find_table(settings, TRAFFIC_1M.table))
    tables = Tables(arrow_dataset(raw), *(arrow_dataset(t) if t is not None else None for t in views))
    tail, found = tail_of(settings), set[str]()
    for site in sorted(events["site_id"].dropna().unique()):
        found |= open_event_ids(tables, str(site), tail)
    return frozenset(found)


def _views_input(
    settings: Settings, dates: tuple[dt.date, ...], events: pd.DataFrame, site_id: str | None, now: dt.datetime
) -> ViewsInput:
    start, end = dates[0], dates[-1]
    site = _site(site_id)
    totals = {"dimension": "all", **site}

    def read(table: str, columns: tuple[str, ...], first: dt.date = start, last: dt.date = end) -> pd.DataFrame:
        return read_rows(
            settings, table, columns, start=first, end=last, equals=site if table == SESSIONS_TABLE else totals
        )

    visits = ("site_id", "visitor_id", "session_start", "session_end", "pageviews", "event_date")
    return ViewsInput(
        dates=dates,
        events=events,
        traffic={table: read(table, ("event_date", "pageviews")) for table in TRAFFIC_TABLES},
        sessions=read(SESSIONS_TABLE, visits, start - DAY),  # visits from the evening before reach into `start`
        visits_1d=read(VISITS_1D.table, ("event_date", "pageviews")),
        visitor_sketches=read(TRAFFIC_1D.table, ("event_date", "visitors_sketch")),
        late_events=read_rows(settings, LATE, ("query", "late_rows", "event_date"), start=start, end=dt.date.max),
        watermark=settings.spark.watermark,
        open_event_ids=open_visit_event_ids(settings, events),
        in_flight_after=int((now - in_flight_span(settings)).timestamp() * 1000),
    )


def audit(
    settings: Settings,
    *,
    start: dt.date,
    end: dt.date,
    site_id: str | None = None,
    now: dt.datetime | None = None,
    record: bool = True,
) -> AuditReport:
    """Run the three reconciliations for event dates ``start..end``; record and quarantine unless told not to."""
    if end < start:
        raise AuditError(f"--to {end} is before --from {start}")
    if find_table(settings, RAW_PAGEVIEWS) is None:
        raise AuditError(f"no raw table at {settings.table_uri(RAW_PAGEVIEWS)}: start the archiver (tally up) first")
    dates = _dates(start, end)
    now = now or dt.datetime.now(dt.UTC)
    lookback = settings.quality.audit_lookback_hours
    since = dt.datetime.combine(start, dt.time(), dt.UTC) - dt.timedelta(hours=lookback)
    scan = _kafka_scan(settings, since)
    columns = (*RAW_COLUMNS, "kafka_partition", "kafka_offset")
    # The day after too: visits that start on the last date may run past midnight.
    events = read_rows(settings, RAW_PAGEVIEWS, columns, start=start, end=end + DAY, equals=_site(site_id))
    events = events.reset_index(drop=True)
    in_range = events[events["event_date"] <= end]
    # A message is rejected when the archiver reads it, so never before it reached Kafka.
    rejected = read_rows(
        settings,
        RAW_REJECTED,
        ("kafka_partition", "kafka_offset"),
        start=since.date(),
        end=dt.date.max,
        partition_by="rejected_date",
        equals={"source_topic": scan.topic},
    )
    findings = reconcile_kafka_raw(scan, in_range, rejected, dates, site_id=site_id)
    views = _views_input(settings, dates, events, site_id, now)
    findings += reconcile_raw_views(views)
    # Events received within the views' latency are in flight: not yet expected of the views
    # (raw_views counts the page views among them apart).
    settled = in_range[in_range["ts_received"] < views.in_flight_after]
    props = read_rows(settings, PROPS_1D.table, PROPS_COLUMNS, start=start, end=end, equals=_site(site_id))
    findings += reconcile_raw_props(PropsInput(dates, settled, props, views.late_events, views.watermark))
    totals = {"dimension": "all", **_site(site_id)}
    vitals = read_rows(settings, VITALS_1H.table, raw_vitals.VIEW_COLUMNS, start=start, end=end, equals=totals)
    findings += reconcile_raw_vitals(VitalsInput(dates, settled, vitals, views.late_events, views.watermark))
    kafka = f"{scan.describe()} (from {lookback} h before {start} by message time, to the end offsets at the start)"
    report = AuditReport(uuid.uuid4().hex, now, start, end, site_id, kafka, tuple(findings))
    if record:
        _record(settings, report)
    return report


def _record(settings: Settings, report: AuditReport) -> None:
    rows = [
        {
            "run_id": report.run_id,
            "audited_at": report.audited_at,
            "date_from": report.start,
            "date_to": report.end,
            "site_id": report.site_id,
            "check": f.check,
            "subject": f.subject,
            "partition_date": f.date,
            "expected": f.expected,
            "actual": f.actual,
            "success": f.ok,
            "message": f"{f.name}: {f.message}",
            "hint": f.hint or None,
        }
        for f in report.findings
    ]
    append(settings, QUALITY_AUDITS, rows, QUALITY_AUDITS_SCHEMA)
    failed: dict[tuple[str, dt.date], list[str]] = defaultdict(list)
    for f in report.findings:
        if f.date is not None:
            failed[(f.subject, f.date)] += [] if f.ok else [f"{f.check}: {f.name}"]
    statuses = [
        PartitionStatus(table, day, report.checker, bool(names), report.run_id, report.audited_at, tuple(names))
        for (table, day), names in sorted(failed.items())
    ]
    record_statuses(settings, statuses)
    for f in mismatches(report.findings):
        MISMATCHES.labels(f.check, f.name).inc()
    for s in statuses:
        if s.quarantined:
            log.error(
                "quality alert: audit mismatch, partition quarantined",
                extra=kv(
                    table=s.table, date=str(s.partition_date), checks="; ".join(s.failed_checks), run_id=report.run_id
                ),
            )
    log.info("audit recorded", extra=kv(run_id=report.run_id, findings=len(report.findings), ok=report.ok))


def render(report: AuditReport) -> str:
    """The readable report: one line per comparison, grouped by check, then what to do."""
    scope = f"site {report.site_id}" if report.site_id else "every site"
    lines = [
        f"tally audit {report.start} .. {report.end}, {scope}  (run {report.run_id}, "
        f"{report.audited_at:%Y-%m-%d %H:%M} UTC)",
        f"kafka: {report.kafka}",
    ]
    for check in CHECKS:
        lines.append("")
        lines.append(check)
        for f in (f for f in report.findings if f.check == check):
            day = str(f.date) if f.date else "-"
            lines.append(f"  {'ok  ' if f.ok else 'FAIL'}  {day:<10}  {f.name:<27}  {f.message}")
    bad = mismatches(report.findings)
    lines.append("")
    if not bad:
        lines.append(f"OK: Kafka, raw and the views agree ({len(report.findings)} comparisons)")
        return "\n".join(lines)
    lines.append(f"MISMATCH: {len(bad)} of {len(report.findings)} comparisons differ; those partitions are quarantined")
    hints = list(dict.fromkeys(f.hint for f in bad if f.hint))
    lines += ["what to do:", *(f"  - {hint}" for hint in hints)]
    return "\n".join(lines)
