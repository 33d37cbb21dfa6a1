"""The data-health panel's reads: freshness, archive lag, late events, quality and audit results.

Only freshness and a one-site audit are figures of one site. Archive lag, late events and the
quality suites' results are counted over every site at once (the tables hold every site's rows),
and so is an all-site audit: the page shows those only to viewers granted every site.
"""

from __future__ import annotations

import datetime as dt
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pyarrow.compute as pc

from dashboard.answers import Asker
from query import freshness
from query.aggregates import Aggregates, Range
from tally.settings import Settings
from tally.storage import archived_offset, read_frame
from tally.table_schemas import QUALITY_AUDITS_SCHEMA, QUALITY_RESULTS_SCHEMA
from tally.tables import LATE_EVENTS, QUALITY_AUDITS, QUALITY_RESULTS, RAW_PAGEVIEWS, TRAFFIC_1M

# The tables this panel reads (the dashboard opens them at start-up: dashboard.page.PAGE_TABLES).
HEALTH_TABLES = (LATE_EVENTS.table, QUALITY_AUDITS, QUALITY_RESULTS, RAW_PAGEVIEWS, TRAFFIC_1M.table)

# Kafka's archive lag is read anew at most this often: page runs in between show the same figure
# (a Kafka probe takes 0.2-0.3 s; the data-health panel is drawn last and would wait for it).
ARCHIVE_LAG_SECONDS = 5.0


@dataclass(frozen=True)
class ArchiveLag:
    """Messages Kafka holds that the raw tables do not, and when the oldest of them reached Kafka."""

    messages: int
    oldest: dt.datetime | None = None  # None when nothing is behind (or its time is unknown)

    def age(self, now: dt.datetime) -> dt.timedelta:
        """How long the oldest unarchived message has waited (zero when none waits)."""
        return max(dt.timedelta(0), now - self.oldest) if self.oldest else dt.timedelta(0)


def late_events(agg: Aggregates, days: Range) -> int:
    """Late events recorded by every streaming query over the range, of every site (Spark counts them per query)."""
    dataset = agg.dataset(LATE_EVENTS.table)
    if dataset is None:
        return 0
    condition = (pc.field("event_date") >= days.start) & (pc.field("event_date") <= days.end)
    rows = dataset.to_table(columns=["late_rows"], filter=condition)
    return int(pc.sum(rows["late_rows"]).as_py() or 0)


def archive_lag_total(settings: Settings, *, probe_timeout: float = 2.0, timeout: float = 10.0) -> ArchiveLag | None:
    """Messages in Kafka that raw.pageviews and raw.rejected do not hold yet, and the time the oldest
    of them was written to Kafka; None when the broker does not answer.

    Kafka gives each partition's end offset; the raw tables' own commits say how far they hold it
    (:func:`tally.storage.archived_offset`), as the archiver's lag gauge measures it. The oldest
    waiting message of each partition is read for its Kafka timestamp.
    """
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    k = settings.kafka
    # log_level 0: a broker that is down is shown as "unknown", not logged on every page view.
    consumer = Consumer({**k.client_config(), "group.id": "tally-dashboard-lag", "log_level": 0})
    try:
        total, waiting = 0, []
        for topic in (k.pageviews_topic, k.rejected_topic):
            for partition in sorted(consumer.list_topics(topic, timeout=probe_timeout).topics[topic].partitions):
                ends = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout)
                if ends is None:  # no answer in time
                    return None
                low, high = ends
                done = max(archived_offset(settings, topic, partition), low)
                total += max(0, high - done)
                if high > done:
                    waiting.append(TopicPartition(topic, partition, done))
        return ArchiveLag(total, _oldest_timestamp(consumer, waiting, timeout=probe_timeout))
    except KafkaException:
        return None
    finally:
        consumer.close()


def _oldest_timestamp(consumer: Any, positions: list[Any], *, timeout: float) -> dt.datetime | None:
    """The earliest Kafka timestamp of the messages at ``positions`` (one per partition); None if none came."""
    if not positions:
        return None
    consumer.assign(positions)
    oldest: int | None = None
    pending = {(p.topic, p.partition) for p in positions}
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is None or message.error():
            continue
        if (message.topic(), message.partition()) in pending:
            pending.discard((message.topic(), message.partition()))
            _, millis = message.timestamp()
            if millis > 0:
                oldest = millis if oldest is None else min(oldest, millis)
    return dt.datetime.fromtimestamp(oldest / 1000, dt.UTC) if oldest is not None else None


def latest_checks(settings: Settings) -> pd.DataFrame:
    """The newest result per table, partition and check (every site's rows), failures first."""
    results = read_frame(settings, QUALITY_RESULTS, QUALITY_RESULTS_SCHEMA)
    if results.empty:
        return pd.DataFrame(columns=["table_name", "partition_date", "check", "success", "checked_at"])
    newest = results.sort_values("checked_at").groupby(["table_name", "partition_date", "check"]).tail(1)
    failing_first = newest.sort_values(["success", "checked_at"], ascending=[True, False])
    return failing_first[["table_name", "partition_date", "check", "success", "checked_at"]].reset_index(drop=True)


AUDIT_COLUMNS = ["audited_at", "partition_date", "check", "subject", "expected", "actual", "success"]


def latest_audit(settings: Settings, site_id: str, *, every_site: bool) -> pd.DataFrame:
    """The comparisons of the newest audit run that covers ``site_id``, failures first.

    A viewer of one site (``every_site`` False) gets only runs of that site (``tally audit --site``)
    and no ``message`` column: a message can name whole-instance figures (archive lag, late rows of
    every site). A viewer of every site also gets all-site runs, with their messages.
    """
    columns = [*AUDIT_COLUMNS, "message"] if every_site else AUDIT_COLUMNS
    audits = read_frame(settings, QUALITY_AUDITS, QUALITY_AUDITS_SCHEMA)
    all_sites = audits["site_id"].isna() | (audits["site_id"] == "")
    relevant = audits[(audits["site_id"] == site_id) | (all_sites & every_site)]
    if relevant.empty:
        return pd.DataFrame(columns=columns)
    newest = relevant[relevant["run_id"] == relevant.sort_values("audited_at")["run_id"].iloc[-1]]
    return newest.sort_values(["success", "check"])[columns].reset_index(drop=True)


@dataclass(frozen=True)
class HealthFigures:
    """The data-health panel's figures of one page run, being computed (:mod:`dashboard.answers`);
    the whole-instance ones (None unless the viewer sees every site) among them."""

    now: dt.datetime
    newest_window: Future[dt.datetime | None]
    newest_event: Future[dt.datetime | None]
    audit: Future[pd.DataFrame]
    bots: Future[int] | None = None  # the site's events from bots and monitors in the range
    archive_lag: Future[ArchiveLag | None] | None = None
    late_events: Future[int] | None = None
    checks: Future[pd.DataFrame] | None = None


def newest_window(ask: Asker, site_id: str, today: dt.date) -> Future[dt.datetime | None]:
    """The end of the site's newest closed minute in agg.traffic_1m, kept until that table changes."""
    read = lambda: freshness.newest_window_end(ask.agg, site_id, today)  # noqa: E731 - a one-line read
    return ask.value(("newest_window_end", site_id, today), (TRAFFIC_1M.table,), read)


def start(
    ask: Asker, settings: Settings, site_id: str, days: Range, now: dt.datetime, *, every_site: bool
) -> HealthFigures:
    """Start every figure of the data-health panel; Kafka's archive lag is read at most every ARCHIVE_LAG_SECONDS."""
    today = now.date()
    newest_event = ask.value(
        ("newest_event", site_id, today), (RAW_PAGEVIEWS,), lambda: freshness.newest_event(ask.agg, site_id, today)
    )
    audit = ask.value(
        ("latest_audit", site_id, every_site),
        (QUALITY_AUDITS,),
        lambda: latest_audit(settings, site_id, every_site=every_site),
    )
    bots = ask.value(
        ("bot_events", site_id, days.start, days.end),
        (RAW_PAGEVIEWS,),
        lambda: freshness.bot_events(ask.agg, site_id, days),
    )
    figures = HealthFigures(now, newest_window(ask, site_id, today), newest_event, audit, bots)
    if not every_site:
        return figures
    return HealthFigures(
        now,
        figures.newest_window,
        newest_event,
        audit,
        bots,
        archive_lag=ask.recent(("archive_lag",), ARCHIVE_LAG_SECONDS, lambda: archive_lag_total(settings)),
        late_events=ask.value(
            ("late_events", days.start, days.end), (LATE_EVENTS.table,), lambda: late_events(ask.agg, days)
        ),
        checks=ask.value(("latest_checks",), (QUALITY_RESULTS,), lambda: latest_checks(settings)),
    )
