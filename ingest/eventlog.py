"""The Kafka adapter of ingest: append to the event log and answer only once it is safe.

Idempotent producer with ``acks=all``: a request is acknowledged to the browser only after
Kafka acknowledged every event in it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from ingest.spool import Record
from tally.settings import IngestSettings

IDLE_POLL_S = 1.0  # with nothing outstanding, still serve the client's own events (errors, logs) now and then


class AppendFailed(RuntimeError):
    """Kafka did not acknowledge the write (broker down past the delivery timeout)."""


class EventLog:
    """Async appends to Kafka topics; delivery reports are served on the event loop's own thread.

    The loop polls the producer every millisecond while deliveries are outstanding (and once a
    second otherwise). A separate poll thread would need the GIL for every delivery report and,
    with the loop busy, wait for it up to the interpreter's switch interval (5 ms) each time.
    """

    def __init__(
        self,
        *,
        client_config: Mapping[str, str | int | float | bool],
        delivery_timeout_ms: int = 5000,
        linger_ms: float = IngestSettings.linger_ms,
        poll_interval_s: float = 0.001,
    ) -> None:
        """``client_config``: bootstrap servers and any extra client properties (SASL/TLS), from settings."""
        self._producer = Producer(
            {
                **client_config,
                "enable.idempotence": True,
                "acks": "all",
                "compression.type": "lz4",
                # Kafka takes a request per partition per linger: a shorter one makes the requests
                # smaller and more numerous, which costs CPU on both sides (ingest.linger_ms).
                "linger.ms": linger_ms,
                "message.timeout.ms": delivery_timeout_ms,
                "client.id": "tally-ingest",
            }
        )
        self._poll_interval_s = poll_interval_s
        self._poller: asyncio.TimerHandle | None = None

    def _poll(self) -> None:
        """Serve delivery reports (their callbacks settle the appends' futures), then poll again."""
        try:
            self._producer.poll(0)
        finally:  # never break the chain: every outstanding append waits on it
            delay = self._poll_interval_s if len(self._producer) else IDLE_POLL_S
            self._poller = asyncio.get_running_loop().call_later(delay, self._poll)

    def _poll_soon(self) -> None:
        """Make sure the next poll is at most one interval away (it may be a second away when idle)."""
        loop = asyncio.get_running_loop()
        if self._poller is not None and self._poller.when() - loop.time() <= self._poll_interval_s:
            return
        if self._poller is not None:
            self._poller.cancel()
        self._poller = loop.call_later(self._poll_interval_s, self._poll)

    async def append(self, records: list[Record]) -> None:
        """Append ``(topic, key, value)`` records; return when Kafka acknowledged all, else raise."""
        assert records, "append at least one record"
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        pending = len(records)
        errors: list[str] = []

        def delivered(err: KafkaError | None, _msg: Message) -> None:  # runs in _poll, on the loop's thread
            nonlocal pending
            if err is not None:
                errors.append(str(err))
            pending -= 1
            if pending == 0:
                _settle(done, "; ".join(errors[:3]) or None)

        produce = self._producer.produce
        for topic, key, value in records:
            while True:
                try:
                    produce(topic, value, key, on_delivery=delivered)
                    break
                except BufferError:
                    # Local queue full: wait for deliveries (backpressure, never drop).
                    self._poll_soon()
                    await asyncio.sleep(0.01)
        self._poll_soon()
        await done

    def close(self, timeout: float = 10.0) -> int:
        """Flush outstanding records; return how many could not be delivered."""
        if self._poller is not None:
            self._poller.cancel()
            self._poller = None
        remaining: int = self._producer.flush(timeout)
        return remaining


def _settle(future: asyncio.Future[Any], error: str | None) -> None:
    if future.done() or future.get_loop().is_closed():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(AppendFailed(error))
