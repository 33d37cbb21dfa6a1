"""The broker's own limit, for ``bench.ingest``: Kafka's ``kafka-producer-perf-test`` on the same broker.

:func:`measure_ceiling` copies the settings of ingest's topic (partitions, replication, every
setting made for the topic) to a new topic, takes ingest's own records from the topic as the
payload (so the size and how well lz4 compresses them are ingest's), and runs
``org.apache.kafka.tools.ProducerPerformance`` from the broker's jars, unthrottled, with the
producer settings ingest's producer has (acks=all, idempotent, lz4, ``ingest.linger_ms``), first
as a warm-up of its own JIT, then timed. The perf test sends no keys; ingest keys by visitor.
"""

from __future__ import annotations

import re
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._config import ConfigResource, ConfigSource  # not re-exported for type checkers
from confluent_kafka.cimpl import NewTopic

from ops import broker
from tally.settings import Settings

PERF_TEST = "org.apache.kafka.tools.ProducerPerformance"
# librdkafka's default batch.size, which ingest's producer runs with (the Java default is 16 KiB).
BATCH_BYTES = 1_000_000
FINAL_LINE = re.compile(
    r"(?P<records>\d+) records sent, (?P<rate>[\d.]+) records/sec \((?P<mb>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, (?P<p50>\d+) ms 50th, "
    r"(?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99.9th"
)


class CeilingError(RuntimeError):
    """The perf test could not be run or its output not read; the message says why."""


@dataclass(frozen=True)
class PerfResult:
    """The perf test's summary line."""

    records: int
    records_per_s: float
    mb_per_s: float
    avg_ms: float
    max_ms: float
    p50_ms: float
    p99_ms: float


def parse_perf_output(output: str) -> PerfResult:
    """The summary of ``ProducerPerformance``'s output (its last line with percentiles)."""
    found = list(FINAL_LINE.finditer(output))
    if not found:
        tail = "\n".join(output.strip().splitlines()[-5:])
        raise CeilingError(f"no summary line in the perf test's output; it ended with:\n{tail}")
    m = found[-1]
    return PerfResult(
        records=int(m["records"]),
        records_per_s=float(m["rate"]),
        mb_per_s=float(m["mb"]),
        avg_ms=float(m["avg"]),
        max_ms=float(m["max"]),
        p50_ms=float(m["p50"]),
        p99_ms=float(m["p99"]),
    )


def copy_topic(settings: Settings, source: str, name: str) -> dict[str, str]:
    """Create ``name`` with ``source``'s partitions, replication and topic settings; return those settings."""
    admin = AdminClient(settings.kafka.client_config())
    meta = admin.list_topics(source, timeout=10).topics[source]
    partitions = len(meta.partitions)
    replicas = len(meta.partitions[0].replicas)
    resource = ConfigResource(ConfigResource.Type.TOPIC, source)
    entries = admin.describe_configs([resource])[resource].result(timeout=10)
    made = {k: e.value for k, e in entries.items() if ConfigSource(e.source) is ConfigSource.DYNAMIC_TOPIC_CONFIG}
    future = admin.create_topics([NewTopic(name, partitions, replicas, config=made)])[name]
    try:
        future.result(timeout=30)
    except KafkaException as e:
        raise CeilingError(f"could not create the perf test's topic {name}: {e}") from e
    return {"partitions": str(partitions), "replication": str(replicas), **made}


def sample_records(settings: Settings, topic: str, count: int = 2000) -> list[bytes]:
    """Up to ``count`` record values from the start of ``topic`` (what ingest wrote)."""
    consumer = Consumer(
        settings.kafka.client_config()
        | {"group.id": "tally-bench-ceiling", "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    values: list[bytes] = []
    try:
        consumer.subscribe([topic])
        empty_polls = 0
        while len(values) < count and empty_polls < 10:
            batch = consumer.consume(min(500, count - len(values)), timeout=1.0)
            empty_polls = 0 if batch else empty_polls + 1
            values += [value for m in batch if m.error() is None and (value := m.value())]
    finally:
        consumer.close()
    if not values:
        raise CeilingError(f"no records in {topic} to use as the perf test's payload")
    return values


def perf_command(settings: Settings, topic: str, payload: Path, records: int) -> list[str]:
    """The perf test's command line: the broker's JVM and jars (ops.broker), ingest's producer settings."""
    props = {
        "bootstrap.servers": settings.kafka.servers,
        "acks": "all",
        "enable.idempotence": "true",
        "compression.type": "lz4",
        "linger.ms": str(round(settings.ingest.linger_ms)),
        "batch.size": str(BATCH_BYTES),
        "client.id": "tally-bench-ceiling",
    }
    args = ["--topic", topic, "--num-records", str(records), "--throughput", "-1", "--payload-file", str(payload)]
    args += ["--producer-props", *(f"{k}={v}" for k, v in props.items())]
    return broker._java_command(settings, PERF_TEST, *args, heap="512m")


def run_perf_test(settings: Settings, topic: str, payload: Path, records: int) -> PerfResult:
    """One unthrottled run of ``records`` records; its summary."""
    command = perf_command(settings, topic, payload, records)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    except subprocess.TimeoutExpired as e:
        raise CeilingError(f"the perf test did not finish {records:,} records in 10 minutes") from e
    if done.returncode != 0:
        raise CeilingError(f"the perf test exited with {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return parse_perf_output(done.stdout)


@dataclass(frozen=True)
class Ceiling:
    """What :func:`measure_ceiling` found."""

    result: PerfResult
    record_bytes: float  # mean size of ingest's record values, the perf test's payload
    topic_settings: dict[str, str]


def measure_ceiling(settings: Settings, folder: Path, *, records: int, warmup_records: int) -> Ceiling:
    """Kafka's own limit on this broker for ingest's records: a warm-up run, then the timed run."""
    values = sample_records(settings, settings.kafka.pageviews_topic)
    # The perf test reads one payload a line: ingest's records are compact JSON, one line each.
    assert not any(b"\n" in v for v in values), "a record value holds a newline: it cannot be a payload line"
    payload = folder / "ceiling-payload.txt"
    payload.write_bytes(b"\n".join(values) + b"\n")
    topic = "bench-ceiling"
    topic_settings = copy_topic(settings, settings.kafka.pageviews_topic, topic)
    run_perf_test(settings, topic, payload, warmup_records)
    result = run_perf_test(settings, topic, payload, records)
    return Ceiling(result, statistics.mean(len(v) for v in values), topic_settings)
