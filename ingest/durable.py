"""Answer 202 only when events are safe: in Kafka, or fsync'd to the local spool.

While Kafka is unreachable, or slower to acknowledge than ``ingest.ack_timeout_ms`` (a partition
leader election), every event goes to the spool (so order is kept) and the endpoint reports
``degraded``; a replayer sends the spool to Kafka in order once the broker answers again
(``draining``), then ingest returns to writing to Kafka directly (``ok``). The replayer
survives every error: it logs it, waits (longer after each failure in a row) and tries again.
After ``RENEW_AFTER_FAILURES`` replays failed on Kafka without progress (spool errors are not
counted), and after every as many more, it also replaces the Kafka producer, which starts again
from new connections and metadata: once, in the fault tests, every replayed delivery timed out
for four minutes after the broker had restarted (2026-11-30).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from itertools import islice

from prometheus_client import Counter

from ingest.eventlog import AckTimeout, AppendFailed, EventLog
from ingest.spool import Record, Spool
from tally.log import kv
from tally.settings import IngestSettings

log = logging.getLogger("tally.ingest.durable")

SPOOLING = Counter(
    "tally_ingest_spooling_total",
    "Times a worker turned to its spool, by why: ack_timeout (Kafka slower than ingest.ack_timeout_ms) "
    "or unavailable (Kafka refused the write or did not deliver it)",
    ["reason"],
)

REPLAY_CHUNK = 2000
REPLAY_INTERVAL_S = 1.0
MAX_BACKOFF_S = 10.0  # between replay attempts after failures in a row
RENEW_AFTER_FAILURES = 3  # replays failed on Kafka without progress before the producer is replaced
DRAINING_FRESH_S = 15.0  # the replayer is draining if it sent a chunk this recently (> the delivery timeout)


@dataclass(frozen=True)
class Health:
    """What ``/healthz`` reports: ``ok``, ``draining`` (the spool is being replayed) or ``degraded``."""

    status: str
    spooled: int  # records in this worker's spool
    spool_bytes: int  # bytes in every worker's spool file (dead workers' too)


class DurableLog:
    """Kafka first; the spool when Kafka fails or is slow; replay in order when it is back."""

    def __init__(
        self, kafka: EventLog, spool: Spool, *, ack_timeout_ms: int | None = IngestSettings.ack_timeout_ms
    ) -> None:
        """``ack_timeout_ms``: how long a request waits for Kafka before its records go to the spool."""
        self.kafka = kafka
        self.spool = spool
        self.ack_timeout_s = ack_timeout_ms / 1000 if ack_timeout_ms else None
        self.degraded = False  # new records go to the spool until a replay succeeds
        self.replay_failures = 0  # replay attempts failed in a row
        self.kafka_failures = 0  # of those, Kafka's, since the producer was last renewed
        self._sent_at = float("-inf")  # monotonic time the replayer last got a chunk into Kafka

    async def append(self, records: list[Record]) -> str:
        """Store records durably; return where: ``"kafka"`` or ``"spool"``.

        Raises :class:`ingest.spool.SpoolWriteFailed` when they had to go to the spool and it
        could not take them: nothing of them is stored, the request must be refused.
        """
        if self.degraded or self.spool.spooled:
            self.spool.append(records)
            return "spool"
        try:
            await self.kafka.append(records, timeout_s=self.ack_timeout_s)
            return "kafka"
        except AppendFailed as e:
            if not self.degraded:
                slow = isinstance(e, AckTimeout)
                SPOOLING.labels(reason="ack_timeout" if slow else "unavailable").inc()
                what = "kafka slow to acknowledge" if slow else "kafka unavailable"
                log.warning(f"{what}, spooling", extra=kv(error=str(e)))
            self.degraded = True
            self.spool.append(records)
            return "spool"

    async def _send(self, records: list[Record]) -> None:
        it = iter(records)
        while chunk := list(islice(it, REPLAY_CHUNK)):
            await self.kafka.append(chunk)
            self._sent_at = time.monotonic()
            self.replay_failures = self.kafka_failures = 0  # progress: draining, the next attempt without delay

    async def replay_once(self) -> int:
        """Send spooled records (dead workers' files first, then ours) to Kafka; return how many.

        Kafka failing leaves ingest degraded (counted in :attr:`replay_failures`); any other
        error (spool I/O) propagates to :meth:`replay_forever`, which logs it and tries again.
        """
        sent = 0
        try:
            with self.spool.orphans() as files:
                for path, records in files:
                    await self._send(records)
                    path.unlink(missing_ok=True)
                    sent += len(records)
            offset = 0
            while self.spool.spooled:
                records, offset = self.spool.read_own(offset)
                await self._send(records)
                sent += len(records)
                if offset == self.spool.size():  # no await since the read: nothing was appended meanwhile
                    self.spool.truncate()
        except AppendFailed as e:
            self.degraded = True
            self._failed(e, sent)
            self.kafka_failures += 1
            if self.kafka_failures >= RENEW_AFTER_FAILURES:
                self.kafka.renew(f"{self.kafka_failures} spool replays failed on Kafka without progress: {e}")
                self.kafka_failures = 0
            return sent
        if self.degraded or sent:
            log.info("kafka back, spool replayed", extra=kv(records=sent))
        self.degraded = False
        self.replay_failures = self.kafka_failures = 0
        return sent

    def _failed(self, error: BaseException, sent: int) -> None:
        self.replay_failures += 1
        log.warning(
            "spool replay failed; will retry",
            extra=kv(error=str(error) or type(error).__name__, sent=sent, failures=self.replay_failures),
        )

    def backoff_s(self, interval_s: float = REPLAY_INTERVAL_S) -> float:
        """Wait before the next replay attempt: the interval, doubled per failure in a row, capped."""
        return min(interval_s * 2.0 ** min(self.replay_failures, 10), MAX_BACKOFF_S)

    async def replay_forever(self, interval_s: float = REPLAY_INTERVAL_S) -> None:
        """Replay whenever something is spooled, for the worker's life: no error ends the loop."""
        while True:
            await asyncio.sleep(self.backoff_s(interval_s))
            try:
                if self.degraded or self.spool.spooled or self.spool.has_orphans():
                    await self.replay_once()
            except Exception as e:  # the loop must outlive anything; the next attempt may succeed
                self._failed(e, 0)
                log.exception("spool replay error", extra=kv(error_type=type(e).__name__))

    def health(self) -> Health:
        """``ok`` when nothing waits in any spool file; ``draining`` while the replayer is getting the
        spool into Kafka; ``degraded`` when it is not (Kafka failing or slow, a replay failing)."""
        spool_bytes = self.spool.pending_bytes()
        if not spool_bytes and not self.degraded:
            status = "ok"
        elif self.replay_failures == 0 and time.monotonic() - self._sent_at < DRAINING_FRESH_S:
            status = "draining"
        else:
            status = "degraded"
        return Health(status, self.spool.spooled, spool_bytes)
