"""The leak scanner finds what it must (so that its 0 means something), and no chance matches."""

from __future__ import annotations

import ipaddress
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from quality.leaks import ScanResult, scan_files
from quality.lz4block import LZ4_BLOCK_MAGIC, decompress_block, decompress_lz4_blocks

IP = "198.51.100.23"


def scan(root: Path, ips: set[str] | None = None) -> ScanResult:
    result = ScanResult()
    scan_files(root, ips or {IP}, result)
    return result


def lz4_literals_only(data: bytes) -> bytes:
    """One LZ4 block holding ``data`` as literals (valid LZ4, just not compressed)."""
    n = len(data)
    if n < 15:
        return bytes([n << 4]) + data
    extra, rest = bytearray(), n - 15
    while rest >= 255:
        extra.append(255)
        rest -= 255
    return bytes([0xF0]) + bytes(extra) + bytes([rest]) + data


def lz4_java_stream(block: bytes, original: int) -> bytes:
    header = LZ4_BLOCK_MAGIC + bytes([0x20]) + len(block).to_bytes(4, "little") + original.to_bytes(4, "little")
    end = LZ4_BLOCK_MAGIC + bytes([0x10]) + bytes(12)
    return header + b"\0\0\0\0" + block + end


def test_an_ip_in_a_log_line_is_a_leak_but_a_longer_number_is_not(tmp_path: Path) -> None:
    (tmp_path / "app.log").write_text(f"ok client=10.0.0.1 peer={IP}:443\nversion 1{IP}1\n")
    (tmp_path / "other.log").write_text(f"{IP}1 and 2{IP}\n")
    result = scan(tmp_path)
    assert [(Path(m.where).name, m.form) for m in result.leaks] == [("app.log", "text")]


def test_a_packed_ip_in_plain_binary_is_a_leak_and_in_random_bytes_a_chance_match(tmp_path: Path) -> None:
    packed = ipaddress.IPv4Address(IP).packed
    (tmp_path / "record.bin").write_bytes(b"\0" * 100 + packed + b"\0" * 100 + packed[::-1] + b"\0" * 100)
    noise = bytearray(os.urandom(4096))
    noise[2000:2004] = packed
    (tmp_path / "compressed.bin").write_bytes(bytes(noise))
    result = scan(tmp_path)
    assert sorted(m.form for m in result.leaks) == ["packed-be", "packed-le"]
    assert [(Path(m.where).name, m.offset) for m in result.chance] == [("compressed.bin", 2000)]


def test_an_ip_hidden_by_parquet_compression_is_found_in_the_decoded_values(tmp_path: Path) -> None:
    ip_as_int = int(ipaddress.IPv4Address("198.51.100.187"))
    table = pa.table(
        {"note": [f"seen {IP} twice"] * 50, "client": pa.array([1, ip_as_int], pa.int64()).take([0] * 49 + [1])}
    )
    pq.write_table(table, tmp_path / "part-0.parquet", compression="zstd")
    result = scan(tmp_path, {IP, "198.51.100.187"})
    decoded = {(m.ip, m.form) for m in result.leaks if "column" in m.where}
    assert decoded == {(IP, "text"), ("198.51.100.187", "integer")}
    assert result.parquet_values == 100


def test_lz4_blocks_decode_literals_and_overlapping_matches() -> None:
    # "abcde", then a match of 8 bytes at distance 5 (overlapping), then the literal "z".
    block = bytes([0x54]) + b"abcde" + bytes([5, 0]) + bytes([0x10]) + b"z"
    assert decompress_block(block, 14) == b"abcdeabcdeabcz"
    state = json.dumps({"visitor": "v1", "client": IP}).encode() * 3
    stream = lz4_java_stream(lz4_literals_only(state), len(state))
    assert decompress_lz4_blocks(stream) == state


def test_an_ip_in_an_lz4_compressed_spark_state_file_is_found(tmp_path: Path) -> None:
    # Compressed so that the address is not in the file's bytes: "00.2|198.51.1", then a match
    # copying "00.2" from 13 bytes back, then "3" -> "00.2|198.51.100.23".
    block = bytes([0xD0]) + b"00.2|198.51.1" + bytes([13, 0]) + bytes([0x10]) + b"3"
    (tmp_path / "1.delta").write_bytes(lz4_java_stream(block, 18))
    result = scan(tmp_path)
    assert result.decompressed_state_files == 1
    assert [(m.where.endswith("(decompressed)"), m.form) for m in result.leaks] == [(True, "text")]


def test_hex_text_beside_an_lz4_token_is_chance_but_a_packed_ip_in_the_state_is_a_leak(tmp_path: Path) -> None:
    # Seen in a 30-minute soak: LZ4 keeps an event id's hex digits as literals, and "…fd3" followed
    # by the token byte 0xc6 is 198.51.100.102 packed little-endian. Only the decompressed bytes count.
    ip = "198.51.100.102"
    packed_le = ipaddress.IPv4Address(ip).packed[::-1]
    assert packed_le == b"fd3\xc6"
    # One sequence: 200 zeros and an id's hex digits as literals, then a 4-byte match at offset
    # 0x00c6 (whose low byte follows the literals); then the literal "z".
    literals = bytes(200) + b"0a9e1c5b-cfd3"
    block = bytes([0xF0, len(literals) - 15]) + literals + bytes([0xC6, 0x00]) + bytes([0x10]) + b"z"
    (tmp_path / "2.snapshot").write_bytes(lz4_java_stream(block, len(literals) + 5))
    result = scan(tmp_path, {ip})
    assert result.leaks == []
    assert [m.form for m in result.chance] == ["packed-le"]

    state = b"\0" * 64 + ipaddress.IPv4Address(ip).packed + b"\0" * 64
    (tmp_path / "3.snapshot").write_bytes(lz4_java_stream(lz4_literals_only(state), len(state)))
    result = scan(tmp_path, {ip})
    assert [(Path(m.where.split(" ")[0]).name, m.form) for m in result.leaks] == [("3.snapshot", "packed-be")]


def test_a_packed_ip_in_a_rocksdb_table_file_is_chance_but_its_text_is_a_leak(tmp_path: Path) -> None:
    # Seen in a 30-minute soak with the views job's state in RocksDB: an event id's hex digits kept as
    # LZ4 literals in a table file's block, then a 0xc6 byte: 198.51.100.102 packed little-endian.
    ip = "198.51.100.102"
    block = bytes(64) + b"0a9e1c5b-cfd3\xc6" + bytes(64)
    (tmp_path / "000123-4c1d.sst").write_bytes(block)
    (tmp_path / "record.bin").write_bytes(block)  # the same bytes in a file of no known format: a leak
    result = scan(tmp_path, {ip})
    assert [Path(m.where).name for m in result.chance] == ["000123-4c1d.sst"]
    assert [(Path(m.where).name, m.form) for m in result.leaks] == [("record.bin", "packed-le")]

    (tmp_path / "000124-9e2a.sst").write_bytes(bytes(64) + f"client={ip};".encode() + bytes(64))
    result = scan(tmp_path, {ip})
    assert ("000124-9e2a.sst", "text") in [(Path(m.where).name, m.form) for m in result.leaks]
