"""bench.ceiling reads Kafka's perf test as it prints and runs it with ingest's producer settings."""

from __future__ import annotations

import pytest

from bench.ceiling import CeilingError, parse_perf_output, perf_command
from tally.settings import load_settings

OUTPUT = """\
[2026-11-25 12:20:01,123] WARN some client warning (org.apache.kafka.clients.producer.KafkaProducer)
612345 records sent, 122444.2 records/sec (71.20 MB/sec), 180.3 ms avg latency, 512.0 ms max latency.
701122 records sent, 140196.3 records/sec (81.53 MB/sec), 160.1 ms avg latency, 402.0 ms max latency.
3000000 records sent, 135501.491316 records/sec (78.80 MB/sec), 171.42 ms avg latency, 611.00 ms max latency, \
158 ms 50th, 298 ms 95th, 381 ms 99th, 560 ms 99.9th.
"""


def test_the_summary_line_is_read_and_the_progress_lines_are_not() -> None:
    result = parse_perf_output(OUTPUT)
    assert result.records == 3_000_000
    assert result.records_per_s == pytest.approx(135_501.491316)
    assert result.mb_per_s == pytest.approx(78.80)
    assert (result.p50_ms, result.p99_ms, result.max_ms) == (158, 381, 611)


def test_output_without_a_summary_says_how_it_ended() -> None:
    with pytest.raises(CeilingError, match=r"(?s)no summary line.*max latency"):
        parse_perf_output(OUTPUT.rsplit("\n", 2)[0])


def test_the_perf_test_produces_as_ingest_does_unthrottled() -> None:
    settings = load_settings()
    command = perf_command(settings, "bench-ceiling", settings.home_dir / "payload.txt", 1000)
    props = command[command.index("--producer-props") + 1 :]
    assert {"acks=all", "enable.idempotence=true", "compression.type=lz4"} <= set(props)
    assert f"linger.ms={round(settings.ingest.linger_ms)}" in props
    assert command[command.index("--throughput") + 1] == "-1"
    assert "org.apache.kafka.tools.ProducerPerformance" in command
