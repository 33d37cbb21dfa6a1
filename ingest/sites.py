"""Follow the compacted sites topic (``kafka.sites_topic``) into a :class:`SiteRegistry` (a thread).

Every ingest worker reads the whole topic from its start with its own consumer, assigned to the
partitions directly (no group, no offsets committed), and keeps reading: a site added, changed
or removed with ``tally site`` counts here within about a second. Records and the fold over the
seed of ``sites:`` are :mod:`tally.site_registry`'s; a bad record is logged there and skipped.
:attr:`SiteFollower.caught_up` is set once the topic has been read to the end it had when the
follower started, so a (re)started worker can wait for the runtime sites before it serves.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tally.log import kv
from tally.site_registry import SiteRegistry

log = logging.getLogger("tally.ingest.sites")

POLL_S = 0.2  # how long one poll waits for a record: at most this much delay for a new site
RETRY_S = 2.0  # wait before asking again for a topic that does not exist yet or a broker that is down


class SiteFollower:
    """One consumer thread that applies every record of the sites topic to ``registry``."""

    def __init__(
        self, *, client_config: Mapping[str, str | int | float | bool], topic: str, registry: SiteRegistry
    ) -> None:
        self.registry = registry
        self.topic = topic
        self.caught_up = threading.Event()
        self._consumer = Consumer(
            {
                **client_config,
                "group.id": f"tally-sites-{uuid.uuid4().hex}",  # never joined nor committed: partitions are assigned
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "log_level": 3,
            }
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sites", daemon=True)
        self._thread.start()

    def _assign(self) -> set[int]:
        """Assign every partition of the topic from its start; the partitions still to read to their end."""
        metadata = self._consumer.list_topics(self.topic, timeout=5).topics.get(self.topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            raise KafkaException(f"topic {self.topic} is not available ({metadata and metadata.error})")
        pending = set()
        for partition in metadata.partitions:
            low, high = self._consumer.get_watermark_offsets(TopicPartition(self.topic, partition), timeout=5)
            if high > low:
                pending.add(partition)
        self._consumer.assign([TopicPartition(self.topic, p, 0) for p in sorted(metadata.partitions)])
        return pending

    def _run(self) -> None:
        pending: set[int] | None = None
        while not self._stop.is_set():
            if pending is None:
                try:
                    pending = self._assign()
                except KafkaException as e:
                    log.warning("sites topic not readable yet, retrying", extra=kv(topic=self.topic, error=str(e)))
                    self._stop.wait(RETRY_S)
                    continue
                if not pending:
                    self._mark_caught_up()
            msg = self._consumer.poll(POLL_S)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition() or 0)
                    if not pending:
                        self._mark_caught_up()
                else:
                    log.warning("sites topic error", extra=kv(error=str(error)))
                continue
            self.registry.apply(msg.key(), msg.value())

    def _mark_caught_up(self) -> None:
        if not self.caught_up.is_set():
            self.caught_up.set()
            log.info("sites read", extra=kv(topic=self.topic, sites=len(self.registry.sites())))

    def close(self) -> None:
        """Stop the thread, then the consumer."""
        self._stop.set()
        self._thread.join(timeout=2)
        self._consumer.close()
