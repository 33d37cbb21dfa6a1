"""The end of every fault test: drain the stack, then prove that nothing was lost or doubled.

Draining: ingest's spool is empty (every 202 is in Kafka), one "closer" event far ahead in
event time moves the streaming watermark past every visit so that the visits close (as in
``tests/integration/test_views_restart.py``), and the archiver and views catch up.
Then three independent comparisons:

1. the load generator's accepted event ids against Kafka and ``raw.pageviews`` (0 lost, 0 doubled,
   nothing extra): what the audit cannot see, since an event lost before Kafka leaves no trace there;
2. ``tally audit --from --to --site``: Kafka = raw = aggregates, exit code 0;
3. the aggregates' page-view totals against the accepted page views.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow.compute as pc
from confluent_kafka import Producer
from deltalake import DeltaTable

from tally.settings import Settings
from tests.events import page_view
from tests.faults.load import LoadReport
from tests.faults.stack import FaultStack
from tests.integration.kafka_reader import read_topic

CLOSER_SITE = "closer.faults.test"  # not the audited site: it only moves the watermark on
TOTALS = {"agg.traffic_1m": "all", "agg.traffic_1h": "all", "agg.traffic_1d": "all", "agg.visits_1d": "all"}


def eventually(condition: Callable[[], bool], timeout: float) -> bool:
    """Poll ``condition`` every half second; whether it held before ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.5)
    return condition()


def spool_empty(home: Path) -> bool:
    """No ingest worker holds an event that is not in Kafka yet."""
    return all(p.stat().st_size == 0 for p in (home / "spool").glob("*.spool"))


def raw_ids(settings: Settings, site: str) -> Counter[str]:
    """Rows per event_id of one site in raw.pageviews."""
    try:
        table = DeltaTable(settings.table_uri("raw.pageviews")).to_pyarrow_dataset()
    except Exception:  # not created yet
        return Counter()
    ids = table.to_table(columns=["event_id"], filter=pc.field("site_id") == site).column("event_id")
    return Counter(ids.to_pylist())


def view_pageviews(settings: Settings, table: str, site: str) -> int:
    """Sum of ``pageviews`` of one site in a view (its ``all`` rows for the dimensioned views)."""
    try:
        dataset = DeltaTable(settings.table_uri(table)).to_pyarrow_dataset()
    except Exception:  # not written yet
        return -1
    where = pc.field("site_id") == site
    if table in TOTALS:
        where = where & (pc.field("dimension") == TOTALS[table])
    column = dataset.to_table(columns=["pageviews"], filter=where).column("pageviews")
    return int(pc.sum(column).as_py() or 0)


def views_totals(settings: Settings, site: str) -> dict[str, int]:
    return {t: view_pageviews(settings, t, site) for t in (*TOTALS, "agg.sessions")}


def produce_closer(settings: Settings) -> None:
    """One event of another site, a session gap plus the watermark (plus 2 minutes) ahead: every
    visit of the audited site closes, as the stream only finalises a visit behind the watermark."""
    ahead = settings.spark.session_gap + settings.spark.watermark
    closer = page_view(CLOSER_SITE, path="/closer")
    moment = int((time.time() + (ahead + dt.timedelta(minutes=2)).total_seconds()) * 1000)
    value = json.loads(closer.to_json()) | {"event_time": moment, "ts_event": moment, "ts_sent": moment}
    producer = Producer({"bootstrap.servers": settings.kafka.servers, "enable.idempotence": True})
    producer.produce(settings.kafka.pageviews_topic, key=closer.visitor_id.encode(), value=json.dumps(value).encode())
    assert producer.flush(30) == 0, "the closer event did not reach Kafka"


def drain(stack: FaultStack, report: LoadReport, timeout: float) -> None:
    """Wait until every accepted event went through Kafka, raw and the views (best effort: the
    comparisons that follow say what is missing if this times out)."""
    settings, site, expected = stack.settings, stack.site, len(report.pageviews)
    assert eventually(lambda: spool_empty(stack.home), timeout), "ingest's spool was never replayed to Kafka"
    produce_closer(settings)
    eventually(lambda: set(report.accepted) <= set(raw_ids(settings, site)), timeout)
    eventually(lambda: set(views_totals(settings, site).values()) == {expected}, timeout)


@dataclass(frozen=True)
class Reconciliation:
    """The comparisons' results, each in numbers a failure message can show."""

    accepted: int
    in_kafka_twice: int  # accepted events that reached Kafka twice (a retried request): dedup must drop them
    lost_before_kafka: list[str]
    lost_in_raw: list[str]
    doubled_in_raw: list[str]
    unexpected_in_raw: list[str]
    views: dict[str, int]
    expected_pageviews: int
    audit_exit: int
    audit_report: str

    def summary(self) -> str:
        return (
            f"accepted {self.accepted}, in Kafka twice {self.in_kafka_twice}, lost before Kafka "
            f"{len(self.lost_before_kafka)}, lost in raw {len(self.lost_in_raw)}, doubled in raw "
            f"{len(self.doubled_in_raw)}, unexpected in raw {len(self.unexpected_in_raw)}; views {self.views} "
            f"(expected {self.expected_pageviews} page views each); audit exit {self.audit_exit}"
        )


def reconcile(stack: FaultStack, report: LoadReport) -> Reconciliation:
    """Compare the load's accepted events with Kafka, raw and the views, and run ``tally audit``."""
    settings, site = stack.settings, stack.site
    in_kafka: Counter[str] = Counter()
    for _, value in read_topic(settings.kafka.servers, settings.kafka.pageviews_topic, timeout=60):
        event = json.loads(value)
        if event.get("site_id") == site:
            in_kafka[event["event_id"]] += 1
    raw = raw_ids(settings, site)
    accepted = set(report.accepted)
    days = sorted(_raw_dates(settings, site)) or [dt.datetime.now(dt.UTC).date()]
    audit = stack.tally("audit", "--from", str(days[0]), "--to", str(days[-1]), "--site", site)
    return Reconciliation(
        accepted=len(accepted),
        in_kafka_twice=sum(1 for i in accepted if in_kafka[i] > 1),
        lost_before_kafka=sorted(accepted - set(in_kafka)),
        lost_in_raw=sorted(accepted - set(raw)),
        doubled_in_raw=sorted(i for i, n in raw.items() if n > 1),
        unexpected_in_raw=sorted(set(raw) - accepted),
        views=views_totals(settings, site),
        expected_pageviews=len(report.pageviews),
        audit_exit=audit.returncode,
        audit_report=audit.stdout + audit.stderr[-3000:],
    )


def _raw_dates(settings: Settings, site: str) -> set[dt.date]:
    table = DeltaTable(settings.table_uri("raw.pageviews")).to_pyarrow_dataset()
    dates = table.to_table(columns=["event_date"], filter=pc.field("site_id") == site).column("event_date")
    return set(dates.to_pylist())


def assert_nothing_lost_or_doubled(result: Reconciliation, report: LoadReport) -> None:
    """The verdict every fault test ends with."""
    assert not report.refused, f"ingest refused valid events: {report.refused[:5]}"
    assert not report.given_up, f"{len(report.given_up)} events were never accepted, retried for minutes"
    assert result.accepted > 0, "the load generator had no event accepted"
    assert not result.lost_before_kafka, f"202 but not in Kafka: {result.summary()}: {result.lost_before_kafka[:5]}"
    assert not result.lost_in_raw, f"lost between Kafka and raw: {result.summary()}: {result.lost_in_raw[:5]}"
    assert not result.doubled_in_raw, f"doubled in raw: {result.summary()}: {result.doubled_in_raw[:5]}"
    assert not result.unexpected_in_raw, f"raw holds events never accepted: {result.summary()}"
    assert set(result.views.values()) == {result.expected_pageviews}, f"views disagree: {result.summary()}"
    assert result.audit_exit == 0, f"tally audit found a mismatch: {result.summary()}\n{result.audit_report}"
