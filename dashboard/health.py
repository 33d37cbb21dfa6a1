"""The data-health panel's reads: freshness, archive lag, late events, quality and audit results."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import pandas as pd
import pyarrow.compute as pc

from dashboard.queries import Aggregates, Range
from tally.settings import Settings
from tally.storage import archived_offset, read_frame
from tally.table_schemas import QUALITY_AUDITS_SCHEMA, QUALITY_RESULTS_SCHEMA
from tally.tables import LATE_EVENTS, QUALITY_AUDITS, QUALITY_RESULTS, TRAFFIC_1M


@dataclass(frozen=True)
class Health:
    last_window_end: dt.datetime | None  # newest 1-minute window with data for the site
    archive_lag: int | None  # messages in Kafka not yet in raw; None = broker unreachable
    late_events: int  # events dropped by the streaming views as late, in the range (a backfill adds them)
    checks: pd.DataFrame  # newest result per table and check: table, partition, check, success
    audit: pd.DataFrame  # the newest audit run's comparisons


def last_window_end(agg: Aggregates, site_id: str, today: dt.date) -> dt.datetime | None:
    rows = agg.rows(
        TRAFFIC_1M.table,
        site_id,
        Range(today - dt.timedelta(days=1), today),
        ["window_end"],
        pc.field("dimension") == "all",
    )
    if rows.empty:
        return None
    newest: dt.datetime = pd.to_datetime(rows["window_end"], utc=True).max().to_pydatetime()
    return newest


def late_events(agg: Aggregates, days: Range) -> int:
    """Late events recorded by every streaming query over the range (not per site: the job counts them)."""
    dataset = agg.dataset(LATE_EVENTS.table)
    if dataset is None:
        return 0
    condition = (pc.field("event_date") >= days.start) & (pc.field("event_date") <= days.end)
    rows = dataset.to_table(columns=["late_rows"], filter=condition)
    return int(pc.sum(rows["late_rows"]).as_py() or 0)


def archive_lag_total(settings: Settings, *, probe_timeout: float = 2.0, timeout: float = 10.0) -> int | None:
    """Messages in Kafka that raw.pageviews and raw.rejected do not hold yet; None when the broker does not answer.

    Kafka gives each partition's end offset; the raw tables' own commits say how far they hold it
    (:func:`tally.storage.archived_offset`), as the archiver's lag gauge measures it.
    """
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    k = settings.kafka
    # log_level 0: a broker that is down is shown as "unknown", not logged on every page view.
    consumer = Consumer({**k.client_config(), "group.id": "tally-dashboard-lag", "log_level": 0})
    try:
        total = 0
        for topic in (k.pageviews_topic, k.rejected_topic):
            for partition in sorted(consumer.list_topics(topic, timeout=probe_timeout).topics[topic].partitions):
                ends = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
                if ends is None:  # no answer in time
                    return None
                low, high = ends
                total += max(0, high - max(archived_offset(settings, topic, partition), low))
        return total
    except KafkaException:
        return None
    finally:
        consumer.close()


def latest_checks(settings: Settings) -> pd.DataFrame:
    results = read_frame(settings, QUALITY_RESULTS, QUALITY_RESULTS_SCHEMA)
    if results.empty:
        return pd.DataFrame(columns=["table_name", "partition_date", "check", "success", "checked_at"])
    newest = results.sort_values("checked_at").groupby(["table_name", "partition_date", "check"]).tail(1)
    failing_first = newest.sort_values(["success", "checked_at"], ascending=[True, False])
    return failing_first[["table_name", "partition_date", "check", "success", "checked_at"]].reset_index(drop=True)


def latest_audit(settings: Settings, site_id: str) -> pd.DataFrame:
    audits = read_frame(settings, QUALITY_AUDITS, QUALITY_AUDITS_SCHEMA)
    if audits.empty:
        return pd.DataFrame(columns=["audited_at", "check", "subject", "expected", "actual", "success", "message"])
    newest = audits[audits["run_id"] == audits.sort_values("audited_at")["run_id"].iloc[-1]]
    mine = newest[(newest["site_id"] == site_id) | newest["site_id"].isna() | (newest["site_id"] == "")]
    columns = ["audited_at", "partition_date", "check", "subject", "expected", "actual", "success", "message"]
    return mine.sort_values(["success", "check"])[columns].reset_index(drop=True)
