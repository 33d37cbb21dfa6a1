"""Quality's records: quarantine verdicts, the result tables and the readable reports (delta-rs on a temp folder)."""

from __future__ import annotations

import dataclasses
import datetime as dt

from quality.audit import AuditReport, render
from quality.checks import CheckRun, PartitionOutcome
from quality.checks import render as render_check
from quality.findings import KAFKA_RAW, RAW_VIEWS, CheckResult, Finding
from quality.quarantine import record_statuses
from quality.store import append_results, read_results
from tally.quarantine import PartitionStatus, quarantined, statuses
from tally.settings import Settings

DAY1, DAY2 = dt.date(2026, 1, 10), dt.date(2026, 1, 11)
T0 = dt.datetime(2026, 1, 12, 3, 0, tzinfo=dt.UTC)


def verdict(table: str, day: dt.date, checker: str, bad: bool, at: dt.datetime = T0) -> PartitionStatus:
    failed = ("pageviews >= 0",) if bad else ()
    return PartitionStatus(table, day, checker, bad, f"run-{at:%H%M}", at, failed)


def test_no_check_run_yet_means_nothing_is_quarantined(settings: Settings) -> None:
    assert quarantined(settings) == [] and statuses(settings) == []


def test_a_partition_stays_quarantined_until_the_checker_that_flagged_it_passes_it(settings: Settings) -> None:
    record_statuses(
        settings,
        [
            verdict("agg.traffic_1h", DAY1, "suite", True),
            verdict("agg.traffic_1h", DAY2, "suite", False),
            verdict("agg.traffic_1h", DAY1, "audit", True),
        ],
    )
    flagged = quarantined(settings)
    assert {(q.table, q.partition_date, q.checker) for q in flagged} == {
        ("agg.traffic_1h", DAY1, "suite"),
        ("agg.traffic_1h", DAY1, "audit"),
    }
    assert flagged[0].failed_checks == ("pageviews >= 0",)
    later = T0 + dt.timedelta(hours=1)
    record_statuses(settings, [verdict("agg.traffic_1h", DAY1, "suite", False, later)])
    assert [(q.table, q.partition_date, q.checker) for q in quarantined(settings)] == [
        ("agg.traffic_1h", DAY1, "audit")
    ]
    assert len(statuses(settings)) == 3, "one verdict per (table, date, checker), overwritten in place"


def test_check_results_are_appended_per_run(settings: Settings) -> None:
    result = CheckResult(
        "agg.sessions", DAY1, "agg.sessions", "pageviews >= 1", "expect_x", "pageviews", False, 2, "{}"
    )
    append_results(settings, "run-1", T0, [result])
    append_results(settings, "run-2", T0, [dataclasses.replace(result, success=True, unexpected_count=None)])
    rows = read_results(settings)
    assert sorted(rows["run_id"]) == ["run-1", "run-2"]
    assert read_results(settings, "run-1")["unexpected_count"].tolist() == [2]


def _report(findings: tuple[Finding, ...]) -> AuditReport:
    return AuditReport("r1", T0, DAY1, DAY2, None, "topic pageviews, offsets p0:0..9, 9 messages read", findings)


def test_the_audit_report_names_each_mismatch_and_says_what_to_do() -> None:
    lost = Finding(
        KAFKA_RAW, "lost events", "raw.pageviews", DAY1, 0, 1, False, "lost 1 events: e3", "check the archiver"
    )
    fine = Finding(RAW_VIEWS, "page views", "agg.traffic_1m", DAY1, 3, 3, True, "agg.traffic_1m: 3 page views")
    text = render(_report((lost, fine)))
    assert "tally audit 2026-01-10 .. 2026-01-11, every site" in text
    assert "  FAIL  2026-01-10  lost events" in text and "  ok    2026-01-10  page views" in text
    assert "MISMATCH: 1 of 2 comparisons differ" in text and "  - check the archiver" in text
    assert "OK: Kafka, raw and the views agree (1 comparisons)" in render(_report((fine,)))


def test_the_check_report_lists_failed_checks_under_their_partition() -> None:
    bad = CheckResult("agg.sessions", DAY1, "agg.sessions", "pageviews >= 1", "expect_x", "pageviews", False, 2, "[0]")
    good = dataclasses.replace(bad, check="site_id not null", success=True)
    run = CheckRun("r2", T0, (PartitionOutcome("agg.sessions", DAY1, 10, (bad, good)),), ("agg.late_events",))
    text = render_check(run)
    assert "FAIL  agg.sessions       2026-01-10         10 rows  1/2  quarantined" in text
    assert "- pageviews >= 1 (expect_x): 2 rows: [0]" in text and "agg.late_events    not written yet" in text
    assert not run.ok
