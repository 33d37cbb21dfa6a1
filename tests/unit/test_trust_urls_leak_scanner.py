"""The leak scanner finds a planted string (a needle) wherever it finds an IP, so its 0 means something.

The fault tests plant an e-mail address and a token in URLs and referrers
(``tests.faults.payloads.PLANTED``) and demand that none is found at rest. Kafka's log segments:
tests/unit/test_leak_scanner_kafka_segments.py.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from quality import leaks
from quality.leaks import Needles, scan_at_rest
from quality.lz4block import LZ4_BLOCK_MAGIC
from tests.faults.payloads import PLANTED, PLANTED_EMAIL, PLANTED_TOKEN
from tests.unit.leak_scan_support import IP, found, scan


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
