"""The stall watch: when the archiver suspects that its Kafka consumer stopped fetching.

Once, after a broker restart, librdkafka never reconnected and the archiver stood still while
Kafka filled up. So when no message comes for a while, the archiver asks Kafka, on a connection
of its own, whether it holds messages the raw tables lack; seen twice in a row, the consumer is
replaced (:meth:`archiver.consumer.Archiver.run`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import KafkaException

from archiver.types import Clock
from tally.log import kv

log = logging.getLogger("tally.archiver")


class StallWatch:
    """When the archiver suspects its consumer: no message for ``after`` seconds, then Kafka found
    behind the raw tables twice, at least ``every`` seconds apart, with no message in between.
    A message that arrives just before a check does not count: the second check would find it gone.

    ``clock`` gives seconds on a monotonic clock (tests pass one they move by hand).
    """

    def __init__(self, after: float, *, every: float = 5.0, clock: Clock = time.monotonic) -> None:
        self.after, self.every = after, every
        self._clock = clock
        self._last_message = clock()
        self._last_check = float("-inf")  # never checked (not 0.0: the monotonic clock starts at boot)
        self._suspect = False

    def fetched(self) -> None:
        """A message came: the consumer works."""
        self._last_message, self._suspect = self._clock(), False

    def idle(self) -> float:
        """Seconds since the last message (or since the start, or the last replacement)."""
        return self._clock() - self._last_message

    def due(self) -> bool:
        """Whether Kafka should be asked now."""
        return self.idle() >= self.after and self._clock() - self._last_check >= self.every

    def behind(self, unarchived: int) -> bool:
        """Record a check's answer; True when the consumer is to be replaced (and start over)."""
        self._last_check = self._clock()
        if not unarchived:
            self._suspect = False
            return False
        if not self._suspect:
            self._suspect = True
            return False
        self.fetched()
        return True

    def check(self, unarchived: Callable[[], int]) -> bool:
        """Ask Kafka how many messages the raw tables lack (``unarchived``, e.g. summing
        :func:`archiver.lag.archive_lag`) and record the answer; True when the consumer is to be
        replaced. Kafka not answering counts as nothing behind: then there is nothing to fetch."""
        try:
            behind = unarchived()
        except KafkaException as e:
            log.info("kafka unreachable, waiting", extra=kv(error=str(e)))
            behind = 0
        if not self.behind(behind):
            return False
        log.warning(
            "kafka consumer stalled, replacing it",
            extra=kv(unarchived=behind, idle_seconds=round(self.idle()), resume="offsets in raw tables"),
        )
        return True
