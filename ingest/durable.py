"""Answer 202 only when events are safe: in Kafka, or fsync'd to the local spool.

While Kafka is unreachable every event goes to the spool (so order is kept) and the
endpoint reports ``degraded``; a replayer sends the spool to Kafka in order once the broker
answers again, then ingest returns to writing to Kafka directly.
"""

from __future__ import annotations

import asyncio
import logging
from itertools import islice

from ingest.eventlog import AppendFailed, EventLog
from ingest.spool import Record, Spool
from tally.log import kv

log = logging.getLogger("tally.ingest.durable")

REPLAY_CHUNK = 2000


class DurableLog:
    """Kafka first; the spool when Kafka fails; replay in order when it is back."""

    def __init__(self, kafka: EventLog, spool: Spool) -> None:
        self.kafka = kafka
        self.spool = spool
        self.degraded = False

    async def append(self, records: list[Record]) -> str:
        """Store records durably; return where: ``"kafka"`` or ``"spool"``."""
        if self.degraded or self.spool.spooled:
            self.spool.append(records)
            return "spool"
        try:
            await self.kafka.append(records)
            return "kafka"
        except AppendFailed as e:
            if not self.degraded:
                log.warning("kafka unavailable, spooling", extra=kv(error=str(e)))
            self.degraded = True
            self.spool.append(records)
            return "spool"

    async def _send(self, records: list[Record]) -> None:
        it = iter(records)
        while chunk := list(islice(it, REPLAY_CHUNK)):
            await self.kafka.append(chunk)

    async def replay_once(self) -> int:
        """Send spooled records (dead workers' files first, then ours) to Kafka; return how many."""
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
            if self.degraded:
                log.info("kafka back, spool replayed", extra=kv(records=sent))
            self.degraded = False
        except AppendFailed:
            self.degraded = True
        return sent

    async def replay_forever(self, interval_s: float = 1.0) -> None:
        while True:
            await asyncio.sleep(interval_s)
            orphans = any(p != self.spool.path for p in self.spool.folder.glob("*.spool"))
            if self.degraded or self.spool.spooled or orphans:
                await self.replay_once()
