"""The archiver: one Kafka consumer group that copies the log into Delta, exactly once.

Reads ``pageviews`` and ``pageviews.rejected``. Valid events go to raw.pageviews; dead
letters, and any message on ``pageviews`` that is not a decodable v1 event (a poison
message), go to raw.rejected, so no partition is ever blocked and nothing is dropped.

Offsets live in the Delta commits (see :mod:`archiver.tables`). Kafka's committed group
offsets are written too, after Delta, only so that consumer lag can be monitored.

This module is the loop that wires the units, each readable and testable on its own:

- :mod:`archiver.kafka`: the consumer, where it resumes, fetching one batch;
- :mod:`archiver.decode` (and :mod:`archiver.columnar`): message values into raw rows;
- :mod:`archiver.batches`: a batch into the rows of each table, replays and duplicates skipped
  (:mod:`archiver.dedup`);
- :mod:`archiver.commit`: the batch into Delta (:mod:`archiver.tables`), then its offsets into Kafka;
- :mod:`archiver.lag`: the lag gauges; :mod:`archiver.stall`: when to replace the consumer.
"""

from __future__ import annotations

import datetime as dt
import faulthandler
import logging
import signal
from collections.abc import Mapping
from types import FrameType

from confluent_kafka import KafkaException, Message
from prometheus_client import Counter, start_http_server

from archiver.batches import BatchBuilder
from archiver.commit import BatchCommit
from archiver.consumed import Consumed
from archiver.decode import event_row, rejected_row, undecodable
from archiver.dedup import SeenIds
from archiver.kafka import assigned_consumer, close_aside, new_consumer, next_batch, positions
from archiver.lag import LagGauges, archive_lag
from archiver.stall import StallWatch
from archiver.tables import ArchiveTable, TableBatch, raw_tables, utc_today
from archiver.types import LagExport
from tally.log import kv
from tally.settings import Settings
from tally.storage import find_table
from tally.tables import RAW_PAGEVIEWS, RAW_REJECTED

# The row builders are still imported from here by tests outside the archiver's folder.
__all__ = ["Archiver", "event_row", "rejected_row", "undecodable"]

log = logging.getLogger("tally.archiver")

REPLACED = Counter(
    "tally_archiver_consumer_replaced_total", "Kafka consumers replaced because they stopped fetching (see StallWatch)"
)


class Archiver:
    """Consume, route each message to its table, commit to Delta, then to Kafka.

    ``tables`` (default: :func:`archiver.tables.raw_tables`) are raw.pageviews and raw.rejected
    by name; ``lag`` (default: :class:`archiver.lag.LagGauges` over them) is called on the
    archiver's thread after every batch and on every loop pass that fetched nothing.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        tables: Mapping[str, ArchiveTable] | None = None,
        lag: LagExport | None = None,
    ) -> None:
        self.settings = settings
        k = settings.kafka
        self.events_topic, self.rejected_topic = k.pageviews_topic, k.rejected_topic
        self.tables = tables if tables is not None else raw_tables(settings)
        self.raw, self.rejected = self.tables[RAW_PAGEVIEWS], self.tables[RAW_REJECTED]
        self.consumer = new_consumer(settings)
        self.lag: LagExport = (
            lag
            if lag is not None
            else LagGauges(self.tables, alert_after=dt.timedelta(minutes=settings.alerts.lag_minutes))
        )
        self.commit = BatchCommit(raw=self.raw, rejected=self.rejected)
        self.duplicates = 0  # events dropped as second copies by the last batch routed
        self._stopping = False
        seen, loaded = _load_seen(settings)
        self.batches = BatchBuilder(
            events_topic=self.events_topic,
            rejected_topic=self.rejected_topic,
            raw=self.raw,
            rejected=self.rejected,
            seen=seen,
        )
        log.info("dedup state loaded", extra=kv(event_ids=loaded, days=settings.archiver.dedup_days))

    @property
    def seen(self) -> SeenIds:
        """The event_ids archived within the dedup horizon (replaceable, e.g. by an empty one)."""
        return self.batches.seen

    @seen.setter
    def seen(self, seen: SeenIds) -> None:
        self.batches.seen = seen

    def route(self, messages: list[Message]) -> tuple[TableBatch, TableBatch]:
        """Split messages into raw rows and rejected rows, skipping those a table already has."""
        batch = self.batches.route(Consumed.of(messages, self.rejected_topic))
        self.duplicates = batch.duplicates
        return batch.raw, batch.rejected

    def archive(self, messages: list[Message]) -> int:
        """Write one batch: raw.rejected first, then raw.pageviews (see README: exactly once)."""
        consumed = Consumed.of(messages, self.rejected_topic)
        batch = self.batches.route(consumed)
        self.duplicates = batch.duplicates
        try:
            self.commit.to_delta(batch)
        except Exception:
            # The ids were marked seen before the commit; a failed commit must not make their
            # replay look like duplicates, so rebuild the state from the table and re-raise.
            self.seen, _ = _load_seen(self.settings)
            raise
        self.seen.forget_before(utc_today())
        self.commit.to_kafka(self.consumer, consumed.next_offsets(), batch)
        self.lag.export(self.consumer)
        raw, rejected = batch.raw.count, batch.rejected.count
        if raw or rejected:
            log.info("archived", extra=kv(events=raw, rejected=rejected, messages=len(messages)))
        return raw

    def stop(self, _signum: int = 0, _frame: FrameType | None = None) -> None:
        """End :meth:`run` after the batch at hand (also the SIGTERM/SIGINT handler)."""
        self._stopping = True

    def stopping(self) -> bool:
        """Whether :meth:`stop` was called."""
        return self._stopping

    def run(self) -> None:
        """Consume until SIGTERM/SIGINT; each batch closes on size or time."""
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        a = self.settings.archiver
        self.consumer.assign(positions(self.consumer, self._tables_by_topic()))
        watch = StallWatch(a.stall_seconds, every=max(5.0, a.stall_seconds / 4))
        if a.metrics_port:
            start_http_server(a.metrics_port, addr="127.0.0.1")
        log.info("archiver started", extra=kv(kafka=self.settings.kafka.servers, warehouse=self.settings.warehouse_uri))
        try:
            while not self._stopping:
                # A loop pass that takes this long is stuck somewhere: every thread's stack to the log.
                faulthandler.dump_traceback_later(max(300.0, 5 * a.stall_seconds), exit=False)
                batch = next_batch(
                    self.consumer, max_batch=a.max_batch, max_wait_seconds=a.max_wait_seconds, stopping=self.stopping
                )
                if batch:
                    self.archive(batch)
                    watch.fetched()
                else:
                    self.lag.export(self.consumer)
                    if watch.due() and watch.check(self._unarchived):
                        self._replace_consumer()
        finally:
            faulthandler.cancel_dump_traceback_later()
            self.consumer.close()
            log.info("archiver stopped")

    def _tables_by_topic(self) -> dict[str, ArchiveTable]:
        return {self.events_topic: self.raw, self.rejected_topic: self.rejected}

    def _unarchived(self) -> int:
        """Messages in Kafka that the raw tables lack, asked on a connection of its own."""
        return sum(archive_lag(self.settings, self.tables).values())

    def _replace_consumer(self) -> None:
        """Replace a consumer that stopped fetching by a new one that resumes at the offsets in
        Delta, as a restarted archiver does: nothing is lost or archived twice."""
        try:
            fresh = assigned_consumer(self.settings, self._tables_by_topic())
        except (KafkaException, RuntimeError) as e:
            log.warning("kafka consumer not replaced, retrying later", extra=kv(error=str(e)))
            return
        stalled, self.consumer = self.consumer, fresh
        close_aside(stalled)
        REPLACED.inc()


def _load_seen(settings: Settings) -> tuple[SeenIds, int]:
    """The dedup state, from raw.pageviews' partitions within the horizon; and how many ids it holds."""
    seen = SeenIds(settings.archiver.dedup_days)
    loaded = seen.load(find_table(settings, RAW_PAGEVIEWS), utc_today())
    return seen, loaded
