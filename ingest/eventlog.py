"""The Kafka adapter of ingest: append to the event log and answer only once it is safe.

Idempotent producer with ``acks=all``: a request is acknowledged to the browser only after
Kafka acknowledged every event in it. An append may be bounded (``ingest.ack_timeout_ms``):
past it, :class:`AckTimeout` tells the caller to make the records durable elsewhere (the
spool); the records stay queued in the producer, and an acknowledgement that comes later is
ignored (the caller's copy is replayed; ``event_id`` deduplication downstream drops the double).

A fatal producer error (the idempotent producer can no longer guarantee order or no
duplicates) makes every later ``produce()`` fail: the producer is then replaced by a new one,
and the old one is kept only until it has reported on every record it held. The caller may
replace it too (:meth:`EventLog.renew`), as the spool's replayer does when every delivery keeps
timing out although the broker is back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from ingest.spool import Record
from tally.log import kv
from tally.settings import IngestSettings

log = logging.getLogger("tally.ingest.eventlog")

IDLE_POLL_S = 1.0  # with nothing outstanding, still serve the client's own events (errors, logs) now and then

ClientConfig = Mapping[str, Any]
ProducerFactory = Callable[[dict[str, Any]], Producer]


class AppendFailed(RuntimeError):
    """Kafka did not acknowledge the write (broker down past the delivery timeout, or it refused it)."""


class AckTimeout(AppendFailed):
    """Kafka did not acknowledge within the caller's bound; the records may still arrive later."""


class EventLog:
    """Async appends to Kafka topics; delivery reports are served on the event loop's own thread.

    The loop polls the producer every millisecond while deliveries are outstanding (and once a
    second otherwise). A separate poll thread would need the GIL for every delivery report and,
    with the loop busy, wait for it up to the interpreter's switch interval (5 ms) each time.
    """

    def __init__(
        self,
        *,
        client_config: ClientConfig,
        delivery_timeout_ms: int = 5000,
        linger_ms: float = IngestSettings.linger_ms,
        poll_interval_s: float = 0.001,
        producer_factory: ProducerFactory | None = None,
    ) -> None:
        """``client_config``: bootstrap servers and any extra client properties (SASL/TLS), from settings.

        ``producer_factory``: builds the producer from its configuration (default: ``Producer``; tests pass a fake).
        """
        self._config: dict[str, Any] = {
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
        self._factory = producer_factory or (lambda config: Producer(config))  # looked up when called
        self._generation = 0
        self._fatal: str | None = None  # set by the error callback: replace the producer at the next poll
        self._last_error = ""
        self._retired: list[Producer] = []  # replaced producers still holding records to report on
        self.replaced = 0  # producers replaced (after a fatal error, or renewed by the caller)
        self._producer = self._new_producer()
        self._poll_interval_s = poll_interval_s
        self._poller: asyncio.TimerHandle | None = None

    def _new_producer(self) -> Producer:
        self._generation += 1
        generation = self._generation

        def on_error(err: KafkaError) -> None:  # runs in poll(), on the loop's thread
            self._on_error(err, generation)

        return self._factory({**self._config, "error_cb": on_error})

    def _on_error(self, err: KafkaError, generation: int) -> None:
        if generation != self._generation:
            return  # a retired producer's last words
        if err.fatal():
            log.error("kafka producer failed fatally; replacing it", extra=kv(error=str(err)))
            self._fatal = str(err)
        elif err.name() != self._last_error:  # transient (broker down, retries): once per kind in a row
            log.warning("kafka client error", extra=kv(error=str(err)))
        self._last_error = err.name()

    def renew(self, reason: str) -> None:
        """Replace the producer by a new one (new connections, a new producer id) for new records;
        the old one reports its outstanding records as failed, so the caller must hold copies (the
        spool does). Done after a fatal error, and by the spool's replayer."""
        old = self._producer
        self._fatal = None
        self._producer = self._new_producer()
        self.replaced += 1
        try:
            old.purge(in_queue=True, in_flight=True, blocking=False)
        except KafkaException as e:  # it still reports each record by its message timeout
            log.warning("kafka producer not purged", extra=kv(error=str(e)))
        self._retired.append(old)
        log.warning("kafka producer replaced", extra=kv(reason=reason, replaced=self.replaced))

    def _poll(self) -> None:
        """Serve delivery reports (their callbacks settle the appends' futures), then poll again."""
        try:
            self._producer.poll(0)
            if self._retired:
                for old in self._retired:
                    old.poll(0)
                self._retired = [old for old in self._retired if len(old)]
            if self._fatal is not None:
                self.renew(self._fatal)
        finally:  # never break the chain: every outstanding append waits on it
            busy = len(self._producer) or self._retired
            delay = self._poll_interval_s if busy else IDLE_POLL_S
            self._poller = asyncio.get_running_loop().call_later(delay, self._poll)

    def _poll_soon(self) -> None:
        """Make sure the next poll is at most one interval away (it may be a second away when idle)."""
        loop = asyncio.get_running_loop()
        if self._poller is not None and self._poller.when() - loop.time() <= self._poll_interval_s:
            return
        if self._poller is not None:
            self._poller.cancel()
        self._poller = loop.call_later(self._poll_interval_s, self._poll)

    async def append(self, records: list[Record], *, timeout_s: float | None = None) -> None:
        """Append ``(topic, key, value)`` records; return when Kafka acknowledged all, else raise
        :class:`AppendFailed` (:class:`AckTimeout` when ``timeout_s`` passed first)."""
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

        try:
            async with asyncio.timeout(timeout_s):
                await self._produce(records, delivered)
                self._poll_soon()
                await done
        except TimeoutError as e:
            done.cancel()  # a late acknowledgement finds it settled and changes nothing
            raise AckTimeout(
                f"Kafka did not acknowledge {len(records)} records within {(timeout_s or 0) * 1000:.0f} ms "
                "(ingest.ack_timeout_ms)"
            ) from e
        except AppendFailed:
            done.cancel()
            raise

    async def _produce(self, records: list[Record], delivered: Callable[[KafkaError | None, Message], None]) -> None:
        for topic, key, value in records:
            while True:
                try:
                    self._producer.produce(topic, value, key, on_delivery=delivered)
                    break
                except BufferError:
                    # Local queue full: wait for deliveries (backpressure, never drop).
                    self._poll_soon()
                    await asyncio.sleep(0.01)
                except KafkaException as e:
                    error = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
                    if error is not None and (error.fatal() or error.code() == KafkaError._FATAL):
                        self.renew(str(error))
                    raise AppendFailed(f"Kafka refused the record: {e}") from e

    def close(self, timeout: float = 10.0) -> int:
        """Flush outstanding records; return how many could not be delivered."""
        if self._poller is not None:
            self._poller.cancel()
            self._poller = None
        for old in self._retired:
            old.flush(0)
        self._retired = []
        remaining: int = self._producer.flush(timeout)
        return remaining


def _settle(future: asyncio.Future[Any], error: str | None) -> None:
    if future.done() or future.get_loop().is_closed():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(AppendFailed(error))
