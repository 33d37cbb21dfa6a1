"""Follow a compacted Kafka topic from its start, for as long as the process lives (one thread).

Ingest, the Stats API and the dashboard each keep the sites of ``kafka.sites_topic`` current
this way. The consumer is assigned every partition directly (no group joined, no offset
committed), so each process reads the whole topic, then every new record within about
``POLL_S``. :attr:`TopicFollower.caught_up` is set once the topic has been read to the end it
had when the follower got it, so a starting process can wait for it before it serves.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tally.log import kv

log = logging.getLogger("tally.topics")

POLL_S = 0.2  # how long one poll waits for a record: at most this much delay for a new one
RETRY_S = 2.0  # wait before asking again for a topic that does not exist yet or a broker that is down

# What a follower does with each record: its key and value (the apps' own decoding and checks).
ApplyRecord = Callable[[bytes | None, bytes | None], None]


class TopicFollower:
    """One consumer thread that hands every record of ``topic`` to ``apply``, from the topic's start."""

    def __init__(
        self,
        *,
        client_config: Mapping[str, str | int | float | bool],
        topic: str,
        apply: ApplyRecord,
        reader: str,
    ) -> None:
        """``reader`` names the process in the consumer's group id and the logs (``ingest``, ``api`` …)."""
        self.topic, self.reader, self._apply = topic, reader, apply
        self.caught_up = threading.Event()
        self._consumer = Consumer(
            {
                **client_config,
                "group.id": f"tally-{reader}-{topic}-{uuid.uuid4().hex}",  # never joined nor committed
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "log_level": 2,  # not each refused connection: the outage is logged once below
            }
        )
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"follow-{topic}", daemon=True)
        self._thread.start()

    def _assign(self) -> set[int]:
        """Assign every partition from its start; return the partitions still to read to their end."""
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
        try:
            self._follow()
        finally:
            self._consumer.close()  # here, by the one thread that uses the consumer

    def _follow(self) -> None:
        pending: set[int] | None = None
        warned = False
        while not self._stop.is_set():
            if pending is None:
                try:
                    pending = self._assign()
                except KafkaException as e:
                    # Once per outage (a down broker would otherwise log every RETRY_S), and not once stopping.
                    if not warned and not self._stop.is_set():
                        log.warning("topic not readable yet, retrying", extra=kv(topic=self.topic, error=str(e)))
                        warned = True
                    self._stop.wait(RETRY_S)
                    continue
                log.info("following topic", extra=kv(topic=self.topic, reader=self.reader))
                if not pending:
                    self.caught_up.set()
            msg = self._consumer.poll(POLL_S)
            if msg is None or self._stop.is_set():
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition() or 0)
                    if not pending:
                        self.caught_up.set()
                else:
                    log.warning("topic error", extra=kv(topic=self.topic, error=str(error)))
                continue
            self._apply(msg.key(), msg.value())

    def close(self, timeout: float = 2.0) -> None:
        """Stop the thread, waiting at most ``timeout`` seconds for it; it applies no record after
        this. The thread closes the consumer as it ends: within ``POLL_S``, or, with the broker down,
        once the metadata requests it is in have timed out (5 s each: the topic's, then one per
        partition). Closing the consumer from here could close it under a call the thread is still
        making."""
        self._stop.set()
        self._thread.join(timeout=timeout)
