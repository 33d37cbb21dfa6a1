"""The leak scanner and Kafka's log segments: a packed IP in the compressed records of a record
batch is a chance match, not a leak, once the scan has read the topics decoded; anywhere else in a
segment (text, an uncompressed batch, a torn tail, a file only named like a segment, the metadata
log no consumer reads) it is a leak (``quality/kafka_segment.py``)."""

from __future__ import annotations

import ipaddress
import struct
from pathlib import Path

import pytest

from quality.leaks import scan_at_rest
from tests.unit.leak_scan_support import found, scan

SOAK_IP = "198.51.100.101"
# Seen in a 30-minute soak, inside an lz4-compressed batch of pageviews-1's log segment: an event id's hex
# digits kept as LZ4 literals, then the token byte 0xc6; "ed3" + 0xc6 is SOAK_IP packed little-endian.
# Zeros around it: low entropy, so only where it lies can make it chance.
HEX_BESIDE_TOKEN = bytes(64) + b"0a9e1c5b-ced3\xc6" + bytes(64)
RECORDS_START = 61  # bytes of a v2 record batch before its records


def record_batch(records: bytes, *, base_offset: int, codec: int = 0) -> bytes:
    """A Kafka record batch (format v2) holding ``records`` as they are: already compressed if ``codec`` says so."""
    # partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta, baseTimestamp, maxTimestamp, producerId,
    # producerEpoch, baseSequence, recordCount; then the records
    after_length = struct.pack(">ibIhiqqqhii", 0, 2, 0, codec, 0, 0, 0, -1, -1, -1, 1) + records
    return struct.pack(">qi", base_offset, len(after_length)) + after_length


def log_segment(home: Path, *batches: bytes, name: str = "pageviews-1/00000000000000000000.log") -> None:
    path = home / "kafka" / "data" / name
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join(batches))


LZ4_BATCH = record_batch(HEX_BESIDE_TOKEN, base_offset=0, codec=3)


@pytest.mark.parametrize(
    ("codec", "records", "leaks", "chance"),
    [
        pytest.param(0, bytes(64) + ipaddress.IPv4Address(SOAK_IP).packed + bytes(64), ["packed-be"], [], id="none"),
        *(
            pytest.param(codec, HEX_BESIDE_TOKEN, [], ["packed-le"], id=name)
            for codec, name in enumerate(("gzip", "snappy", "lz4", "zstd"), start=1)
        ),
        pytest.param(3, f'{{"client":"{SOAK_IP}"}}'.encode(), ["text"], [], id="lz4-text"),
    ],
)
def test_a_packed_ip_in_a_kafka_log_segment_is_chance_only_in_the_records_of_a_compressed_batch(
    tmp_path: Path, codec: int, records: bytes, leaks: list[str], chance: list[str]
) -> None:
    assert ipaddress.IPv4Address(SOAK_IP).packed[::-1] == b"ed3\xc6"
    batches = [record_batch(bytes(40), base_offset=0), record_batch(records, base_offset=1, codec=codec)]
    log_segment(tmp_path, *batches, record_batch(bytes(40), base_offset=2))
    result = scan(tmp_path, ip=SOAK_IP, kafka_decoded=True)
    assert [m.form for m in result.leaks] == leaks
    assert [m.form for m in result.chance] == chance


def test_a_packed_ip_in_a_truncated_last_batch_of_a_kafka_log_segment_is_a_leak(tmp_path: Path) -> None:
    torn = record_batch(HEX_BESIDE_TOKEN, base_offset=1, codec=3)[:-20]  # the broker stopped while writing it
    log_segment(tmp_path, LZ4_BATCH, torn)
    result = scan(tmp_path, ip=SOAK_IP, kafka_decoded=True)
    at = RECORDS_START + HEX_BESIDE_TOKEN.index(b"ed3\xc6")
    assert [m.offset for m in result.chance] == [at]
    assert [(m.offset, m.form) for m in result.leaks] == [(len(LZ4_BATCH) + at, "packed-le")]


@pytest.mark.parametrize(
    ("name", "contents"),
    [
        pytest.param("pageviews-1/00000000000000000000.log", b"not a batch\n" * 8 + HEX_BESIDE_TOKEN, id="garbage"),
        pytest.param("pageviews-1/00000000000000000007.log", LZ4_BATCH, id="an-offset-below-the-segments"),
        pytest.param("pageviews-1/00000000000000000000.log.deleted", LZ4_BATCH, id="deleted"),
        pytest.param("pageviews/00000000000000000000.log", LZ4_BATCH, id="not-in-a-partition-directory"),
        pytest.param(
            "__cluster_metadata-0/00000000000000000000.log", LZ4_BATCH, id="the-metadata-log-no-consumer-reads"
        ),
    ],
)
def test_a_file_that_is_not_a_kafka_log_segment_by_its_name_or_its_headers_is_judged_as_any_file(
    tmp_path: Path, name: str, contents: bytes
) -> None:
    log_segment(tmp_path, contents, name=name)
    assert found(scan(tmp_path, ip=SOAK_IP, kafka_decoded=True)) == {(Path(name).name, SOAK_IP, "packed-le")}


def test_without_a_broker_to_read_the_topics_decoded_a_packed_ip_in_a_compressed_batch_is_a_leak(
    tmp_path: Path,
) -> None:
    log_segment(tmp_path, LZ4_BATCH)
    assert [m.form for m in scan_at_rest(tmp_path, {SOAK_IP}, None).leaks] == ["packed-le"]
