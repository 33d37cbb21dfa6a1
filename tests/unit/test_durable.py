"""The durable log against in-memory fakes: the replayer outlives every failure, a slow Kafka
sends the request to the spool, and /healthz tells degraded from draining."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import ClassVar

from confluent_kafka import KafkaError, KafkaException
from prometheus_client import REGISTRY

from ingest.durable import RENEW_AFTER_FAILURES, DurableLog
from ingest.eventlog import AckTimeout, AppendFailed, EventLog
from ingest.spool import Record, Spool

R1: Record = ("pageviews", b"k1", b"v1")
R2: Record = ("pageviews", b"k2", b"v2")


class FlakyKafka:
    """Stands for :class:`ingest.eventlog.EventLog`: raises the queued errors first, one per append."""

    def __init__(self, *errors: BaseException, delay_s: float = 0.0) -> None:
        self.errors = list(errors)
        self.delay_s = delay_s
        self.stored: list[Record] = []
        self.renewed: list[str] = []  # the reasons the durable log gave for replacing the producer

    def renew(self, reason: str) -> None:
        self.renewed.append(reason)

    async def append(self, records: list[Record], *, timeout_s: float | None = None) -> None:
        if self.errors:
            raise self.errors.pop(0)
        await asyncio.sleep(self.delay_s)
        self.stored += records


def durable(kafka: FlakyKafka, spool: Spool, ack_timeout_ms: int | None = None) -> DurableLog:
    if ack_timeout_ms is None:
        return DurableLog(kafka, spool)  # type: ignore[arg-type]
    return DurableLog(kafka, spool, ack_timeout_ms=ack_timeout_ms)  # type: ignore[arg-type]


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


def run_replayer(store: DurableLog, check: Callable[[], Awaitable[None]]) -> None:
    async def main() -> None:
        replayer = asyncio.create_task(store.replay_forever(interval_s=0.01))
        try:
            await check()
            assert not replayer.done(), "the replayer died"
        finally:
            replayer.cancel()

    asyncio.run(main())


class FailingReads(Spool):
    """A spool whose first ``failures`` reads of its own file fail (a disk error)."""

    failures = 2

    def read_own(self, offset: int) -> tuple[list[Record], int]:
        if self.failures:
            self.failures -= 1
            raise OSError(5, "Input/output error")
        return super().read_own(offset)


def test_the_replayer_outlives_kafka_exceptions_and_spool_io_errors(tmp_path: Path) -> None:
    fatal = KafkaException(KafkaError(KafkaError._FATAL, "fatal idempotent producer error"))
    kafka = FlakyKafka(AppendFailed("down"), fatal, RuntimeError("anything else"))
    spool = FailingReads(tmp_path)
    store = durable(kafka, spool)
    spool.append([R1, R2])
    store.degraded = True

    async def check() -> None:
        await until(lambda: kafka.stored == [R1, R2] and spool.spooled == 0)

    run_replayer(store, check)
    assert store.degraded is False and spool.size() == 0
    assert kafka.renewed == []  # one failure on Kafka: the producer is kept


def test_the_producer_is_renewed_after_every_few_failed_replays_in_a_row(tmp_path: Path) -> None:
    timeouts = [AppendFailed("Local: Message timed out") for _ in range(2 * RENEW_AFTER_FAILURES + 1)]
    kafka = FlakyKafka(*timeouts)
    spool = Spool(tmp_path)
    store = durable(kafka, spool)
    spool.append([R1])
    store.degraded = True

    async def main() -> None:
        for attempt in range(1, len(timeouts) + 1):
            assert await store.replay_once() == 0
            assert len(kafka.renewed) == attempt // RENEW_AFTER_FAILURES, attempt
        assert await store.replay_once() == 1

    asyncio.run(main())
    assert kafka.stored == [R1] and not store.degraded and store.replay_failures == 0
    assert kafka.renewed[0].startswith(f"{RENEW_AFTER_FAILURES} spool replays failed on Kafka without progress: Local")


def replayed_with_spool_errors(tmp_path: Path, kafka_failures: int) -> FlakyKafka:
    """Replay one record through a spool whose reads fail ``RENEW_AFTER_FAILURES`` times first, then
    a Kafka that fails ``kafka_failures`` times; returns the Kafka."""
    kafka = FlakyKafka(*[AppendFailed("Local: Message timed out") for _ in range(kafka_failures)])
    spool = FailingReads(tmp_path)
    spool.failures = RENEW_AFTER_FAILURES
    store = durable(kafka, spool)
    spool.append([R1])
    store.degraded = True

    async def check() -> None:
        await until(lambda: kafka.stored == [R1])

    run_replayer(store, check)
    return kafka


def test_spool_errors_do_not_count_towards_renewing_the_producer(tmp_path: Path) -> None:
    assert replayed_with_spool_errors(tmp_path / "a", 0).renewed == []
    assert replayed_with_spool_errors(tmp_path / "b", RENEW_AFTER_FAILURES - 1).renewed == []
    assert len(replayed_with_spool_errors(tmp_path / "c", RENEW_AFTER_FAILURES).renewed) == 1


def test_a_dead_workers_spool_is_replayed_even_when_the_first_attempt_fails(tmp_path: Path) -> None:
    orphan = Spool(tmp_path)
    orphan.append([R1])
    orphan.close()  # closed unreplayed: the file stays, unlocked, as a dead worker's would
    kafka = FlakyKafka(OSError(28, "No space left on device"))
    store = durable(kafka, Spool(tmp_path))

    async def check() -> None:
        await until(lambda: kafka.stored == [R1] and not orphan.path.exists())

    run_replayer(store, check)


def test_kafka_slower_than_the_ack_timeout_sends_the_request_to_the_spool(tmp_path: Path) -> None:
    kafka = FlakyKafka(delay_s=5.0)
    spool = Spool(tmp_path)
    store = durable(kafka, spool, ack_timeout_ms=100)

    class Bounded(FlakyKafka):  # what EventLog does with timeout_s
        async def append(self, records: list[Record], *, timeout_s: float | None = None) -> None:
            try:
                await asyncio.wait_for(FlakyKafka.append(self, records), timeout_s)
            except TimeoutError as e:
                raise AppendFailed("slow") from e

    store.kafka = Bounded(delay_s=5.0)  # type: ignore[assignment]

    async def append() -> tuple[str, float]:
        started = time.monotonic()
        where = await store.append([R1])
        return where, time.monotonic() - started

    where, took = asyncio.run(append())
    assert where == "spool" and took < 1.0
    assert spool.read_own(0)[0] == [R1]
    assert store.health().status == "degraded"
    assert kafka.stored == []


def spooling(reason: str) -> float:
    return REGISTRY.get_sample_value("tally_ingest_spooling_total", {"reason": reason}) or 0.0


def test_each_turn_to_the_spool_is_counted_by_why(tmp_path: Path) -> None:
    before = {r: spooling(r) for r in ("ack_timeout", "unavailable")}
    slow = durable(FlakyKafka(AckTimeout("slow")), Spool(tmp_path / "a"))
    down = durable(FlakyKafka(AppendFailed("down")), Spool(tmp_path / "b"))

    async def main() -> None:
        assert await slow.append([R1]) == "spool"
        assert await slow.append([R2]) == "spool"  # still degraded: one turn, not two
        assert await down.append([R1]) == "spool"

    asyncio.run(main())
    assert spooling("ack_timeout") - before["ack_timeout"] == 1
    assert spooling("unavailable") - before["unavailable"] == 1


def test_health_is_degraded_while_the_spool_waits_then_draining_then_ok(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    store = durable(FlakyKafka(AppendFailed("down"), AppendFailed("still down")), spool)
    assert store.health().status == "ok"

    class Gated(FlakyKafka):  # stores a chunk, then answers once its gate opens
        gates: ClassVar[list[asyncio.Event]] = [asyncio.Event(), asyncio.Event()]

        async def append(self, records: list[Record], *, timeout_s: float | None = None) -> None:
            self.stored += records
            await self.gates[len(self.stored) - 1].wait()

    async def steps() -> list[str]:
        seen = [await store.append([R1])]
        seen.append(store.health().status)  # in the spool, Kafka failing: degraded
        await store.replay_once()  # fails: still degraded
        seen.append(store.health().status)
        kafka = store.kafka = Gated()  # type: ignore[assignment]
        replay = asyncio.create_task(store.replay_once())
        await until(lambda: kafka.stored == [R1])
        seen.append(store.health().status)  # the chunk is sent, Kafka has not answered yet: still degraded
        spool.append([R2])  # more came meanwhile: a second chunk after the first
        kafka.gates[0].set()
        await until(lambda: kafka.stored == [R1, R2])
        seen.append(store.health().status)  # one chunk acknowledged, the next on its way: draining
        kafka.gates[1].set()
        await replay
        seen.append(store.health().status)
        return seen

    assert asyncio.run(steps()) == ["spool", "degraded", "degraded", "degraded", "draining", "ok"]


def test_health_is_degraded_when_the_spool_waits_and_nothing_replays_it(tmp_path: Path) -> None:
    orphan = Spool(tmp_path)
    orphan.append([R1])
    orphan.close()
    store = durable(FlakyKafka(), Spool(tmp_path))
    assert store.health().status == "degraded"  # a dead worker's file, no replay yet: not draining
    assert store.health().spool_bytes > 0


class FakeProducer:
    """The confluent_kafka.Producer calls EventLog makes; acknowledgements come when released."""

    made: ClassVar[list[FakeProducer]] = []

    def __init__(self, config: dict[str, object]) -> None:
        self.config = config
        self.queued: list[tuple[bytes, object]] = []
        self.release = False
        self.fatal: KafkaError | None = None
        self.purged = False
        FakeProducer.made.append(self)

    def produce(self, topic: str, value: bytes, key: bytes | None, on_delivery: object) -> None:
        if self.fatal is not None:
            raise KafkaException(KafkaError(KafkaError._FATAL, "fatal error raised"))
        self.queued.append((value, on_delivery))

    def poll(self, _timeout: float) -> int:
        if self.fatal is not None:
            self.config["error_cb"](self.fatal)  # type: ignore[operator]
        if self.purged:
            failed = KafkaError(KafkaError._PURGE_QUEUE, "purged")
            for _, callback in self.queued:
                callback(failed, None)  # type: ignore[operator]
            self.queued = []
        if self.release:
            for _, callback in self.queued:
                callback(None, None)  # type: ignore[operator]
            self.queued = []
        return 0

    def purge(self, **_: bool) -> None:
        self.purged = True

    def flush(self, _timeout: float) -> int:
        return len(self.queued)

    def __len__(self) -> int:
        return len(self.queued)


def event_log() -> EventLog:
    FakeProducer.made = []
    return EventLog(client_config={}, producer_factory=FakeProducer)  # type: ignore[arg-type]


def test_an_ack_after_the_timeout_is_ignored_and_the_next_append_is_acknowledged() -> None:
    log = event_log()
    producer = FakeProducer.made[0]

    async def main() -> None:
        try:
            await log.append([R1], timeout_s=0.05)
            raise AssertionError("expected AckTimeout")
        except AppendFailed:
            pass
        producer.release = True  # the late acknowledgement: settles nothing, raises nothing
        await log.append([R2], timeout_s=1.0)
        assert producer.queued == []

    loop_errors: list[dict[str, object]] = []

    async def watched() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, context: loop_errors.append(context))
        await main()

    asyncio.run(watched())
    assert loop_errors == []


def test_a_fatal_producer_error_replaces_the_producer_and_fails_what_it_held() -> None:
    log = event_log()
    first = FakeProducer.made[0]

    async def main() -> None:
        held = asyncio.create_task(log.append([R1]))
        await asyncio.sleep(0.01)
        first.fatal = KafkaError(KafkaError._FATAL, "idempotent producer: unrecoverable sequence gap", fatal=True)
        try:
            await asyncio.wait_for(held, 2)
            raise AssertionError("expected AppendFailed")
        except AppendFailed:
            pass  # the record it held is reported failed (the caller spools it), not left hanging
        assert len(FakeProducer.made) == 2 and log.replaced == 1
        FakeProducer.made[1].release = True
        await log.append([R2], timeout_s=1.0)

    asyncio.run(main())


def test_renew_replaces_the_producer_and_fails_what_the_old_one_held() -> None:
    log = event_log()

    async def main() -> None:
        held = asyncio.create_task(log.append([R1]))
        await asyncio.sleep(0.01)
        log.renew("replays kept timing out")
        assert len(FakeProducer.made) == 2 and log.replaced == 1
        try:
            await asyncio.wait_for(held, 2)
            raise AssertionError("expected AppendFailed")
        except AppendFailed:
            pass  # the old producer's record is reported failed: the spool's copy is replayed
        FakeProducer.made[1].release = True
        await log.append([R2], timeout_s=1.0)  # the new producer takes new records
        assert FakeProducer.made[1].queued == []

    asyncio.run(main())


def test_produce_refusing_after_a_fatal_error_is_an_append_failure_and_a_new_producer() -> None:
    log = event_log()
    FakeProducer.made[0].fatal = KafkaError(KafkaError._FATAL, "fenced", fatal=True)

    async def main() -> None:
        try:
            await log.append([R1], timeout_s=1.0)
            raise AssertionError("expected AppendFailed")
        except AppendFailed:
            pass
        FakeProducer.made[-1].release = True
        await log.append([R2], timeout_s=1.0)

    asyncio.run(main())
    assert log.replaced >= 1
