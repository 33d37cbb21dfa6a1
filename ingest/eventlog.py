"""The Kafka adapter of ingest: append to the event log and answer only once it is safe.

Idempotent producer with ``acks=all``: a request is acknowledged to the browser only after
Kafka acknowledged every event in it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from ingest.spool import Record


class AppendFailed(RuntimeError):
    """Kafka did not acknowledge the write (broker down past the delivery timeout)."""


class EventLog:
    """Async appends to Kafka topics, with a background thread serving delivery reports."""

    def __init__(
        self, *, client_config: Mapping[str, str | int | float | bool], delivery_timeout_ms: int = 5000
    ) -> None:
        """``client_config``: bootstrap servers and any extra client properties (SASL/TLS), from settings."""
        self._producer = Producer(
            {
                **client_config,
                "enable.idempotence": True,
                "acks": "all",
                "compression.type": "lz4",
                "linger.ms": 2,
                "message.timeout.ms": delivery_timeout_ms,
                "client.id": "tally-ingest",
            }
        )
        self._running = True
        self._poller = threading.Thread(target=self._poll, name="kafka-delivery", daemon=True)
        self._poller.start()

    def _poll(self) -> None:
        while self._running:
            self._producer.poll(0.1)

    async def append(self, records: list[Record]) -> None:
        """Append ``(topic, key, value)`` records; return when Kafka acknowledged all, else raise."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        pending = [len(records)]
        errors: list[str] = []

        def delivered(err: KafkaError | None, _msg: Message) -> None:  # runs on the poll thread
            if err is not None:
                errors.append(str(err))
            pending[0] -= 1
            if pending[0] == 0:
                loop.call_soon_threadsafe(_settle, done, "; ".join(errors[:3]) or None)

        for topic, key, value in records:
            while True:
                try:
                    self._producer.produce(topic, value=value, key=key, on_delivery=delivered)
                    break
                except BufferError:
                    # Local queue full: wait for deliveries (backpressure, never drop).
                    await asyncio.sleep(0.01)
        await done

    def close(self, timeout: float = 10.0) -> int:
        """Flush outstanding records; return how many could not be delivered."""
        remaining: int = self._producer.flush(timeout)
        self._running = False
        self._poller.join(timeout=1)
        return remaining


def _settle(future: asyncio.Future[Any], error: str | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(AppendFailed(error))
