"""Follow the compacted ``ratelimit.blocks`` topic into a :class:`BlockList` (a background thread).

Every ingest worker reads the whole topic from the start with its own consumer (no group
offsets), so each replica honours every block the Spark rate-limit job publishes.
Record: key = client hash, value = ``{"blocked_until": <epoch ms>}``; a null value lifts the block.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaError

from ingest.ratelimit import BlockList
from tally.log import kv

log = logging.getLogger("tally.ingest.blocks")


class BlockFollower:
    def __init__(self, *, client_config: Mapping[str, str | int | float | bool], topic: str, blocks: BlockList) -> None:
        self.blocks = blocks
        self._consumer = Consumer(
            {
                **client_config,
                "group.id": f"tally-ingest-blocks-{uuid.uuid4().hex}",  # never committed: read all, always
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "log_level": 3,
            }
        )
        self._consumer.subscribe([topic])
        self._running = True
        self._thread = threading.Thread(target=self._run, name="ratelimit-blocks", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._follow()
        finally:
            self._consumer.close()  # here, by the one thread that uses the consumer

    def _follow(self) -> None:
        while self._running:
            msg = self._consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    log.warning("blocks topic error", extra=kv(error=str(error)))
                continue
            key, value = msg.key(), msg.value()
            if not key:
                continue
            try:
                until = json.loads(value)["blocked_until"] if value else None
                self.blocks.update(key.decode(), int(until) if until is not None else None)
            except (ValueError, KeyError, TypeError) as e:
                log.warning("bad block record ignored", extra=kv(error=str(e)))

    def close(self) -> None:
        """Stop the thread, waiting at most 2 s for it; it closes the consumer as it ends (closing it
        from here could close it under a poll the thread is still in)."""
        self._running = False
        self._thread.join(timeout=2)
