"""Kafka = raw: every event in the ``pageviews`` topic is archived once, and nothing else is.

Pure comparison logic over a bounded scan of the topic (``quality.kafka_log``) and the raw rows
of the audited dates. Two views of the same question:

- **event ids**, per date: the distinct event_ids in Kafka (by event date) equal the distinct
  event_ids in ``raw.pageviews``. Ids in Kafka but not in raw are *lost*; raw rows sharing an id
  are *doubled*; ids in raw at a scanned position that Kafka does not hold are *not in Kafka*.
- **offsets**: every scanned message of those dates (and every undecodable one) is accounted
  for by a raw row at its (partition, offset), by a raw row with the same event_id (the archiver
  drops repeats of an id it has archived: ``archiver/dedup.py``), or by a ``raw.rejected`` row at
  its position. Messages past the offset the raw table records as archived are *pending*
  (archive lag), not lost.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from quality.findings import KAFKA_RAW, Finding, examples
from tally.tables import RAW_PAGEVIEWS

LOST_HINT = (
    "the archiver did not store these events; they stay in Kafka until its retention passes: check `tally status`"
    " (archive lag) and .tally/logs/archiver.log"
)
DOUBLED_HINT = "raw.pageviews must be unique on event_id: delete the extra copies (keep the lowest kafka_offset)"
FOREIGN_HINT = "raw.pageviews holds rows Kafka never carried at that position: find who wrote them (Delta history)"
OFFSETS_HINT = "messages that reached neither raw table: check the archiver (tally status, archiver log)"


@dataclass(frozen=True)
class KafkaScan:
    """What was read from the topic, and where reading started and stopped."""

    topic: str
    ranges: Mapping[int, tuple[int, int]]  # partition -> [first, end) offsets read
    # partition, offset, and for a v1 event its event_id, event_date and site_id (null otherwise)
    messages: pd.DataFrame
    archived_until: Mapping[int, int | None]  # next offset raw.pageviews records per partition, if any

    def describe(self) -> str:
        spans = " ".join(f"p{p}:{a}..{b}" for p, (a, b) in sorted(self.ranges.items()))
        return f"topic {self.topic}, offsets {spans or '(none)'}, {len(self.messages):,} messages read"


def _positions(frame: pd.DataFrame, partition: str, offset: str) -> pd.DataFrame:
    known = frame.dropna(subset=[partition, offset])
    return known.assign(partition=known[partition].astype("int64"), offset=known[offset].astype("int64"))


def _in_scan(raw: pd.DataFrame, scan: KafkaScan) -> pd.Series:
    """Raw rows whose Kafka position lies inside the scanned offsets (others cannot be compared)."""
    inside = pd.Series(False, index=raw.index)
    for partition, (first, end) in scan.ranges.items():
        offsets = raw["kafka_offset"]
        inside |= (raw["kafka_partition"] == partition) & (offsets >= first) & (offsets < end)
    return inside.fillna(False).astype(bool)


def _considered(scan: KafkaScan, dates: Sequence[dt.date], site_id: str | None) -> tuple[pd.DataFrame, int]:
    """Messages this audit must account for, and how many more are not archived yet."""
    msgs = scan.messages
    limit = msgs["partition"].map(lambda p: scan.archived_until.get(int(p)))
    pending = limit.notna() & (msgs["offset"] >= limit.fillna(0))
    msgs = msgs[~pending]
    decodable = msgs["event_id"].notna()
    in_range = decodable & msgs["event_date"].isin(list(dates))
    if site_id is not None:  # an undecodable message names no site: a one-site audit skips them
        return msgs[in_range & (msgs["site_id"] == site_id)], int(pending.sum())
    return msgs[in_range | ~decodable], int(pending.sum())


def reconcile_kafka_raw(
    scan: KafkaScan,
    raw: pd.DataFrame,
    rejected: pd.DataFrame,
    dates: Sequence[dt.date],
    *,
    site_id: str | None = None,
) -> list[Finding]:
    """Compare the scan with raw rows (event_id, event_date, kafka_partition, kafka_offset) of ``dates``
    and with raw.rejected positions (kafka_partition, kafka_offset) of this topic."""
    considered, pending = _considered(scan, dates, site_id)
    in_kafka = set(scan.messages["event_id"].dropna())
    raw_ids = set(raw["event_id"])
    in_scan = _in_scan(raw, scan)
    findings: list[Finding] = []
    for day in dates:
        kafka_ids = set(considered.loc[considered["event_date"] == day, "event_id"].dropna())
        rows = raw[raw["event_date"] == day]
        lost = sorted(kafka_ids - raw_ids)
        copies = rows["event_id"].value_counts()
        copies = copies[copies > 1]
        doubled = int((copies - 1).sum())
        foreign = sorted(set(rows.loc[in_scan[rows.index], "event_id"]) - in_kafka)
        unscanned = int((~in_scan[rows.index]).sum())
        ids_ok = not lost and not foreign
        note = f" ({unscanned:,} raw rows outside the scanned offsets: not compared)" if unscanned else ""
        findings.append(
            Finding(
                KAFKA_RAW,
                "event ids",
                RAW_PAGEVIEWS,
                day,
                len(kafka_ids),
                rows["event_id"].nunique(),
                ids_ok,
                f"{len(kafka_ids):,} event ids in Kafka, {rows['event_id'].nunique():,} in {RAW_PAGEVIEWS}{note}",
                "" if ids_ok else LOST_HINT if lost else FOREIGN_HINT,
            )
        )
        if lost:
            message = f"lost {len(lost):,} events: in Kafka, not in {RAW_PAGEVIEWS}: {examples(lost)}"
            findings.append(
                Finding(KAFKA_RAW, "lost events", RAW_PAGEVIEWS, day, 0, len(lost), False, message, LOST_HINT)
            )
        if doubled:
            shown = examples(f"{event_id} ×{n}" for event_id, n in copies.items())
            message = f"doubled {doubled:,} events: extra raw rows for an event_id already archived: {shown}"
            findings.append(
                Finding(KAFKA_RAW, "doubled events", RAW_PAGEVIEWS, day, 0, doubled, False, message, DOUBLED_HINT)
            )
        if foreign:
            message = f"{len(foreign):,} raw rows at scanned offsets hold event ids Kafka does not: {examples(foreign)}"
            findings.append(
                Finding(KAFKA_RAW, "events not in Kafka", RAW_PAGEVIEWS, day, 0, len(foreign), False, message)
            )
    findings.append(_offsets(considered, raw, rejected, pending, raw_ids))
    return findings


def _offsets(
    considered: pd.DataFrame, raw: pd.DataFrame, rejected: pd.DataFrame, pending: int, raw_ids: set[str]
) -> Finding:
    """Every considered message accounted for by a raw row, a repeat of an archived id, or a rejection."""
    at_raw = _positions(raw, "kafka_partition", "kafka_offset")[["partition", "offset", "event_id"]]
    at_raw = at_raw.drop_duplicates(["partition", "offset"]).rename(columns={"event_id": "raw_event_id"})
    at_rejected = _positions(rejected, "kafka_partition", "kafka_offset")[["partition", "offset"]].drop_duplicates()
    msgs = considered.merge(at_raw, on=["partition", "offset"], how="left")
    msgs = msgs.merge(at_rejected.assign(rejected=True), on=["partition", "offset"], how="left")
    archived = msgs["raw_event_id"].notna() & (msgs["raw_event_id"] == msgs["event_id"])
    misplaced = msgs["raw_event_id"].notna() & ~archived & msgs["event_id"].notna()
    repeated = ~archived & ~misplaced & msgs["event_id"].isin(raw_ids)
    rejected_here = ~archived & ~repeated & msgs["rejected"].fillna(False).astype(bool)
    unaccounted = ~(archived | repeated | rejected_here)
    counts = {
        "archived": int(archived.sum()),
        "duplicates dropped": int(repeated.sum()),
        "rejected": int(rejected_here.sum()),
        "unaccounted": int(unaccounted.sum()),
    }
    message = f"{len(msgs):,} messages: " + ", ".join(f"{n:,} {what}" for what, n in counts.items())
    if pending:
        message += f" ({pending:,} more past the archived offsets: archive lag, not compared)"
    if unaccounted.any():
        where = msgs[unaccounted]
        message += ": " + examples((f"p{p}:{o}" for p, o in zip(where["partition"], where["offset"], strict=True)))
    if misplaced.any():
        message += f"; {int(misplaced.sum()):,} raw rows sit at the offset of another event"
    ok = not unaccounted.any()
    accounted = len(msgs) - counts["unaccounted"]
    return Finding(
        KAFKA_RAW, "offsets", RAW_PAGEVIEWS, None, len(msgs), accounted, ok, message, "" if ok else OFFSETS_HINT
    )
