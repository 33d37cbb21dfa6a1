"""Archive lag per Kafka partition: messages in the log that the raw tables do not hold yet.

Measured against the offsets recorded in the Delta commits (the archiver's real progress),
not against Kafka's committed group offsets. Two ways: :class:`LagGauges` from what the
archiver's consumer last fetched (no request of its own, every loop pass), and
:func:`archive_lag` on a connection of its own (the stall watch, ``tally status``).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from prometheus_client import Gauge

from archiver.tables import raw_tables
from archiver.types import ArchivedOffsets
from tally.lag import LagAlarm, OffsetClock, Partition
from tally.settings import Settings

LAG = Gauge("tally_archiver_lag_messages", "Messages in Kafka not yet in the raw tables", ["topic", "partition"])
LAG_SECONDS = Gauge("tally_archiver_lag_seconds", "How long ago Kafka's end was where the raw tables are now")

log = logging.getLogger("tally.archiver")


def archived_to(tables: Mapping[str, ArchivedOffsets], topic: str, partition: int) -> int:
    """The offset below which every message of (topic, partition) is archived, in either raw table:
    a poison message on pageviews goes to raw.rejected, so raw.pageviews alone would stay behind it."""
    return max(table.next_offset(topic, partition) or 0 for table in tables.values())


class LagGauges:
    """The archiver's lag export (:class:`archiver.types.LagExport`): ``tally_archiver_lag_messages``
    per assigned partition, Kafka's high watermark as last fetched (no extra request) minus
    :func:`archived_to` the raw tables; and the lag as time (:class:`tally.lag.OffsetClock`),
    ``tally_archiver_lag_seconds``, logged as an alert past ``alert_after``."""

    def __init__(
        self,
        tables: Mapping[str, ArchivedOffsets],
        *,
        alert_after: dt.timedelta = dt.timedelta(minutes=10),
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self.tables = tables
        self.clock = OffsetClock()
        self.alarm = LagAlarm("archive", alert_after, log)
        self._now = clock

    def export(self, consumer: Consumer) -> None:
        """Set the gauge of every partition ``consumer`` is assigned whose watermark it knows."""
        ends: dict[Partition, int] = {}
        done: dict[Partition, int] = {}
        for tp in consumer.assignment():
            _, high = consumer.get_watermark_offsets(tp, cached=True)
            if high is not None and high >= 0:
                key = (tp.topic, tp.partition)
                ends[key], done[key] = high, archived_to(self.tables, tp.topic, tp.partition)
                LAG.labels(topic=tp.topic, partition=str(tp.partition)).set(max(0, high - done[key]))
        if ends:
            now = self._now()
            self.clock.record_end(now, ends)
            lag = self.clock.lag(now, done)
            if lag is not None:
                LAG_SECONDS.set(lag.total_seconds())
            self.alarm.observe(lag)


def archive_lag(settings: Settings, raw: Mapping[str, ArchivedOffsets] | None = None) -> dict[tuple[str, int], int]:
    """``{(topic, partition): messages not yet archived}`` for pageviews and pageviews.rejected.

    Asked on a connection of its own; ``raw`` (``raw_tables``) saves reading the tables again.
    Raises ``KafkaException`` when the broker does not answer within 10 seconds.
    """
    k = settings.kafka
    raw = raw if raw is not None else raw_tables(settings)
    consumer = Consumer({**k.client_config(), "group.id": "tally-lag-probe", "log_level": 0})
    try:
        lag = {}
        for topic in (k.pageviews_topic, k.rejected_topic):
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            for partition in sorted(partitions):
                ends = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
                if ends is None:  # no answer in time
                    raise KafkaException(KafkaError(KafkaError._TIMED_OUT, f"no watermarks for {topic} [{partition}]"))
                low, high = ends
                lag[(topic, partition)] = max(0, high - max(archived_to(raw, topic, partition), low))
        return lag
    finally:
        consumer.close()
