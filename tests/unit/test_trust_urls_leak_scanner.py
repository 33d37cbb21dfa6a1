"""The leak scanner finds a planted string (a needle) wherever it finds an IP, so its 0 means something.

The fault tests plant an e-mail address and a token in URLs and referrers
(``tests.faults.payloads.PLANTED``) and demand that none is found at rest. A packed IP in the
compressed records of a Kafka log segment is a chance match, not a leak: those are searched decoded.
"""

from __future__ import annotations

import ipaddress
import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from quality import leaks
from quality.leaks import Needles, ScanResult, scan_at_rest, scan_files
from quality.lz4block import LZ4_BLOCK_MAGIC
from tests.faults.payloads import PLANTED, PLANTED_EMAIL, PLANTED_TOKEN

IP = "198.51.100.23"


def scan(root: Path, needles: tuple[str, ...] = PLANTED, *, ip: str = IP, kafka_decoded: bool = False) -> ScanResult:
    result = ScanResult()
    scan_files(root, {ip}, result, needles=Needles.of(needles), kafka_decoded=kafka_decoded)
    return result


def found(result: ScanResult) -> set[tuple[str, str, str]]:
    return {(Path(m.where.split(" ")[0]).name, m.found, m.form) for m in result.leaks}


def test_a_planted_email_and_token_in_a_log_line_are_found_as_sent_and_percent_encoded(tmp_path: Path) -> None:
    encoded = PLANTED_EMAIL.replace("@", "%40")
    (tmp_path / "ingest.log").write_text(f"GET /p?to={encoded}&t={PLANTED_TOKEN}\nuser {PLANTED_EMAIL}\n")
    (tmp_path / "clean.log").write_text("GET /p?utm_source=news\n")
    assert found(scan(tmp_path)) == {
        ("ingest.log", PLANTED_EMAIL, "needle-percent-encoded"),
        ("ingest.log", PLANTED_TOKEN, "needle"),
        ("ingest.log", PLANTED_EMAIL, "needle"),
    }


def test_a_planted_string_in_a_parquet_file_is_found_in_its_decoded_values(tmp_path: Path) -> None:
    urls = [f"https://a.example/p{i}" for i in range(99)] + [f"https://a.example/p?token={PLANTED_TOKEN}"]
    table = pa.table({"url": urls, "referrer": [None] * 99 + [f"https://mail.example/?to={PLANTED_EMAIL}"]})
    pq.write_table(table, tmp_path / "part-0.parquet", compression="zstd")
    result = scan(tmp_path)
    decoded = {(m.found, m.where.rsplit(" ", 3)[1]) for m in result.leaks if "column" in m.where}
    assert decoded == {(PLANTED_TOKEN, "url"), (PLANTED_EMAIL, "referrer")}


def test_a_planted_string_in_an_lz4_compressed_spark_state_file_is_found(tmp_path: Path) -> None:
    # One LZ4 block: the literals "3f9a1c07|tk-planted-", a match copying "3f9a1c07" from 20 bytes
    # back, then the literals "e5b2d846": the token is whole only once decompressed.
    assert PLANTED_TOKEN == "tk-planted-3f9a1c07e5b2d846"
    first, last = b"3f9a1c07|tk-planted-", b"e5b2d846"
    block = bytes([0xF4, len(first) - 15]) + first + len(first).to_bytes(2, "little") + bytes([len(last) << 4]) + last
    original = len(first) + 8 + len(last)
    header = LZ4_BLOCK_MAGIC + bytes([0x20]) + len(block).to_bytes(4, "little") + original.to_bytes(4, "little")
    (tmp_path / "1.delta").write_bytes(header + bytes(4) + block + LZ4_BLOCK_MAGIC + bytes([0x10]) + bytes(12))
    assert PLANTED_TOKEN.encode() not in (tmp_path / "1.delta").read_bytes()
    result = scan(tmp_path)
    assert result.decompressed_state_files == 1
    assert [(m.where.endswith("(decompressed)"), m.found) for m in result.leaks] == [(True, PLANTED_TOKEN)]


PACKED_IP = ipaddress.IPv4Address(IP).packed


@pytest.mark.parametrize(
    ("at", "found", "form"),
    [
        pytest.param(50, PLANTED_EMAIL.encode(), "needle", id="a-needle-the-chunk-boundary-cuts"),
        pytest.param(62, PACKED_IP, "packed-be", id="a-packed-ip-the-chunk-boundary-cuts"),
        pytest.param(54, PACKED_IP, "packed-be", id="a-packed-ip-in-the-bytes-both-chunks-read"),
        pytest.param(48, IP.encode(), "text", id="an-ip-as-text-in-the-bytes-both-chunks-read"),
    ],
)
def test_a_match_near_a_read_chunks_end_is_found_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at: int, found: bytes, form: str
) -> None:
    monkeypatch.setattr(leaks, "CHUNK", 64)
    (tmp_path / "big.log").write_bytes(b"x" * at + found + b"y" * 200)
    assert [(m.offset, m.form) for m in scan(tmp_path).leaks] == [(at, form)]


def test_scan_at_rest_searches_the_files_for_the_needles_it_is_given(tmp_path: Path) -> None:
    (tmp_path / "spool.bin").write_bytes(b"\0" * 10 + f'{{"url":"https://a.example/?t={PLANTED_TOKEN}"}}'.encode())
    assert [m.found for m in scan_at_rest(tmp_path, {IP}, None, needles=PLANTED).leaks] == [PLANTED_TOKEN]
    assert scan_at_rest(tmp_path, {IP}, None).leaks == []


def test_a_needle_too_short_to_mean_anything_is_refused() -> None:
    with pytest.raises(AssertionError, match="too short"):
        Needles.of(["a@b.c"])


def test_a_packed_ip_spelled_by_a_parquet_files_encoded_numbers_is_chance_but_its_value_is_a_leak(
    tmp_path: Path,
) -> None:
    packed_le = int.from_bytes(bytes(reversed([198, 51, 100, 23])), "little")
    # Plain-encoded and uncompressed, the 8 bytes of this number hold the 4 packed bytes in a run of
    # zeros (low entropy), yet no value equals the address: only the decoded search may judge it.
    spelled = pa.table({"n": pa.array([0] * 100 + [packed_le + (1 << 40)] + [0] * 100, pa.int64())})
    pq.write_table(spelled, tmp_path / "spelled.parquet", compression="none", use_dictionary=False)
    result = scan_at_rest(tmp_path, {IP}, None)
    assert result.leaks == []
    assert result.chance and {m.form for m in result.chance} == {"packed-le"}  # the page, its statistics

    pq.write_table(pa.table({"n": pa.array([packed_le], pa.int64())}), tmp_path / "held.parquet", compression="none")
    held = scan_at_rest(tmp_path, {IP}, None)
    assert [(m.found, m.form) for m in held.leaks] == [(IP, "integer")], "the address as a value is found decoded"


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
