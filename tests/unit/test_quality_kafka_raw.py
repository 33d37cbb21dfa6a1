"""Kafka = raw: every message accounted for, lost and doubled events named (pure logic, no services)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence

import pandas as pd

from quality.findings import Finding
from quality.kafka_raw import KafkaScan, reconcile_kafka_raw

DAY1, DAY2 = dt.date(2026, 1, 10), dt.date(2026, 1, 11)
SITE = "a.test"

# The log: partition 0 holds e1..e4 (e2 sent twice: a browser retry) and a poison message;
# partition 1 holds e5 (of the day after) and e6 (of a day outside the audit).
LOG = [
    (0, 0, "e1", DAY1),
    (0, 1, "e2", DAY1),
    (0, 2, "e2", DAY1),
    (0, 3, "e3", DAY1),
    (0, 4, None, None),
    (0, 5, "e4", DAY2),
    (1, 0, "e5", DAY2),
    (1, 1, "e6", dt.date(2026, 1, 20)),
]


def scan(
    log: Sequence[tuple[int, int, str | None, dt.date | None]] = LOG,
    ranges: Mapping[int, tuple[int, int]] | None = None,
    archived_until: Mapping[int, int | None] | None = None,
) -> KafkaScan:
    messages = pd.DataFrame(
        {
            "partition": [m[0] for m in log],
            "offset": [m[1] for m in log],
            "event_id": [m[2] for m in log],
            "event_date": [m[3] for m in log],
            "site_id": [SITE if m[2] else None for m in log],
        }
    )
    return KafkaScan("pageviews", ranges or {0: (0, 6), 1: (0, 2)}, messages, archived_until or {0: None, 1: None})


def raw(*rows: tuple[str, dt.date, int | None, int | None]) -> pd.DataFrame:
    columns = ["event_id", "event_date", "kafka_partition", "kafka_offset"]
    return pd.DataFrame([list(r) for r in rows], columns=columns)


ARCHIVED = [("e1", DAY1, 0, 0), ("e2", DAY1, 0, 1), ("e3", DAY1, 0, 3), ("e4", DAY2, 0, 5), ("e5", DAY2, 1, 0)]
REJECTED = pd.DataFrame({"kafka_partition": [0], "kafka_offset": [4]})


def failed(findings: list[Finding]) -> dict[tuple[str, dt.date | None], Finding]:
    return {(f.name, f.date): f for f in findings if not f.ok}


def test_an_archive_that_holds_every_event_once_matches_the_log() -> None:
    findings = reconcile_kafka_raw(scan(), raw(*ARCHIVED), REJECTED, [DAY1, DAY2])
    assert failed(findings) == {}
    offsets = next(f for f in findings if f.name == "offsets")
    assert offsets.message.startswith("7 messages: 5 archived, 1 duplicates dropped, 1 rejected, 0 unaccounted")
    ids = [(f.date, f.expected, f.actual) for f in findings if f.name == "event ids"]
    assert ids == [(DAY1, 3, 3), (DAY2, 2, 2)]


def test_an_event_missing_from_raw_is_lost_and_its_offset_unaccounted() -> None:
    findings = failed(reconcile_kafka_raw(scan(), raw(*ARCHIVED[:2], *ARCHIVED[3:]), REJECTED, [DAY1, DAY2]))
    assert set(findings) == {("event ids", DAY1), ("lost events", DAY1), ("offsets", None)}
    assert findings[("lost events", DAY1)].actual == 1 and "e3" in findings[("lost events", DAY1)].message
    assert "1 unaccounted: p0:3" in findings[("offsets", None)].message


def test_a_second_raw_row_of_an_event_is_doubled() -> None:
    findings = failed(reconcile_kafka_raw(scan(), raw(*ARCHIVED, ("e2", DAY1, 0, 2)), REJECTED, [DAY1, DAY2]))
    assert set(findings) == {("doubled events", DAY1)}
    assert findings[("doubled events", DAY1)].actual == 1 and "e2 ×2" in findings[("doubled events", DAY1)].message


def test_a_poison_message_missing_from_raw_rejected_is_unaccounted() -> None:
    findings = failed(reconcile_kafka_raw(scan(), raw(*ARCHIVED), REJECTED.iloc[:0], [DAY1, DAY2]))
    assert set(findings) == {("offsets", None)} and "p0:4" in findings[("offsets", None)].message


def test_a_raw_row_kafka_never_carried_is_named() -> None:
    log = [*LOG[:5], (0, 5, "e9", DAY2), *LOG[6:]]  # Kafka holds e9 where raw says e4 sits
    findings = failed(reconcile_kafka_raw(scan(log), raw(*ARCHIVED), REJECTED, [DAY1, DAY2]))
    assert ("events not in Kafka", DAY2) in findings and "e4" in findings[("events not in Kafka", DAY2)].message
    assert ("lost events", DAY2) in findings and "e9" in findings[("lost events", DAY2)].message
    assert "1 raw rows sit at the offset of another event" in findings[("offsets", None)].message


def test_messages_past_the_archived_offsets_are_pending_not_lost() -> None:
    pending = scan(archived_until={0: 3, 1: 1})  # the archiver has not reached e3, the poison message, e4
    findings = reconcile_kafka_raw(pending, raw(*ARCHIVED[:2], ARCHIVED[4]), REJECTED.iloc[:0], [DAY1, DAY2])
    assert failed(findings) == {}
    offsets = next(f for f in findings if f.name == "offsets")
    assert "(4 more past the archived offsets: archive lag, not compared)" in offsets.message


def test_raw_rows_older_than_the_scan_are_not_compared_but_still_count_as_archived() -> None:
    # The scan of partition 0 starts at offset 2 (time bound or retention): e1 and the first e2 are not read.
    findings = reconcile_kafka_raw(scan(ranges={0: (2, 6), 1: (0, 2)}), raw(*ARCHIVED), REJECTED, [DAY1])
    ids = next(f for f in findings if f.name == "event ids")
    assert ids.ok and "2 raw rows outside the scanned offsets: not compared" in ids.message
    assert failed(findings) == {}


def test_a_one_site_audit_skips_messages_that_name_no_site() -> None:
    findings = reconcile_kafka_raw(scan(), raw(*ARCHIVED), REJECTED.iloc[:0], [DAY1, DAY2], site_id=SITE)
    assert failed(findings) == {}
    assert next(f for f in findings if f.name == "offsets").expected == 6
