"""Search every byte Tally keeps at rest for client IP addresses and planted strings: there must be none.

The planted strings (*needles*) are what a test sent inside URLs and referrers and Tally must not
keep: an e-mail address, a token. Each is searched as sent and percent-encoded (``a%40b.example``),
wherever the IPs are searched in text.

Where it looks, under a stack's home (Kafka log dirs, Delta files, Spark checkpoints, logs,
spool, salts, everything):

- **raw bytes** of every file, for each IP as text (``198.51.100.23``, not part of a longer
  number) and packed (4 bytes, network and little-endian order);
- **decoded content**, since compression can hide a leak from a byte search: every record of
  every Kafka topic as a consumer receives it (decompressed; only when ``scan_at_rest`` is given
  the broker), every value of every Parquet file, and Spark's LZ4-compressed state files,
  decompressed (RocksDB's ``.sst`` table files are not decoded: a packed form in them is a chance
  match, a text form a leak).

A packed IP is four arbitrary bytes, so it also turns up by chance in compressed or random-looking
data (about ``bytes / 2**32`` times per pattern): jars, compressed pages, HLL sketches. A match of
a packed form inside high-entropy bytes is therefore reported as a *chance match*, not a leak:
compressed data would hide a real packed IP anyway, which the decoded search covers, and a
packed IP in a plain record (low entropy around it) is a leak. Text forms never match by chance.

Compressed bytes are not always high-entropy: LZ4 keeps hex text (event ids) as literals beside
binary token bytes, and "ed3" + the token 0xc6 is 198.51.100.101 packed little-endian. So in
encoded bytes that are searched again decoded, a packed form is a chance match whatever the
entropy around it: Parquet files, lz4-java state files, and the records of the compressed batches
in the broker's log segments (``<topic>-<n>/<20 digits>.log`` whose v2 batch headers parse:
``quality.kafka_segment``), which ``scan_kafka`` reads decompressed. That last rule rests on
``scan_kafka``: ``scan_at_rest`` without Kafka servers reads no topic, so then a packed form in a
compressed batch is a leak, as nothing else would check it. A segment's uncompressed batches, the
bytes outside or after the batches that parse (a torn tail, garbage) and a file only named like a
segment are judged as any other file.
"""

from __future__ import annotations

import ipaddress
import math
import re
import time
import uuid
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from confluent_kafka import Consumer, KafkaError, TopicPartition

from quality.kafka_segment import compressed_payloads, segment_base_offset
from quality.lz4block import LZ4_BLOCK_MAGIC, decompress_lz4_blocks

CHUNK = 64 * 2**20
ENTROPY_WINDOW = 256
HIGH_ENTROPY_BITS = 6.5  # bits per byte over the window: compressed or random data, not text or plain records
DOTTED_QUAD = re.compile(rb"(?<![0-9.])(?:[0-9]{1,3}\.){3}[0-9]{1,3}(?![0-9])")


@dataclass(frozen=True)
class Match:
    """One occurrence of a client IP or a needle: where, at which byte offset, and in which form."""

    where: str
    offset: int
    found: str  # the IP address or the needle
    form: str  # "text", "packed-be", "packed-le", "integer"; of a needle: "needle" or "needle-percent-encoded"
    size: int = 0  # the bytes it spans from ``offset``, in a byte search (0 in a decoded value: no offsets there)

    @property
    def ip(self) -> str:
        """The IP address found (or the needle: see ``form``)."""
        return self.found


@dataclass(frozen=True)
class Needles:
    """Strings that must not be at rest, with the byte forms they could be stored in."""

    forms: dict[bytes, tuple[str, str]] = field(default_factory=dict)  # bytes -> (needle, form)

    @classmethod
    def of(cls, needles: Iterable[str]) -> Needles:
        """Each needle as sent (UTF-8) and percent-encoded, as a URL's query would carry it."""
        forms: dict[bytes, tuple[str, str]] = {}
        for needle in needles:
            assert len(needle) >= 8, f"needle {needle!r} is too short to be told from chance text"
            forms[quote(needle, safe="").encode()] = (needle, "needle-percent-encoded")
            forms[needle.encode()] = (needle, "needle")
        return cls(forms)

    @property
    def longest(self) -> int:
        return max((len(form) for form in self.forms), default=0)

    def find(self, data: bytes, where: str, *, base: int = 0) -> list[Match]:
        """Every occurrence of every form in ``data``; offsets are ``base`` + position."""
        found = []
        for pattern, (needle, form) in self.forms.items():
            at = data.find(pattern)
            while at >= 0:
                found.append(Match(where, base + at, needle, form, len(pattern)))
                at = data.find(pattern, at + 1)
        return found


NO_NEEDLES = Needles()


@dataclass
class ScanResult:
    """Leaks (must be empty), chance matches of packed forms in compressed data, and what was read."""

    leaks: list[Match] = field(default_factory=list)
    chance: list[Match] = field(default_factory=list)
    files: int = 0
    bytes_scanned: int = 0
    kafka_records: int = 0
    parquet_values: int = 0
    decompressed_state_files: int = 0

    def expected_chance(self, ips: int) -> float:
        """Chance matches expected in this many bytes of random data, for two packed forms per IP."""
        return self.bytes_scanned * 2 * ips / 2**32

    def summary(self) -> str:
        return (
            f"{self.files} files ({self.bytes_scanned / 2**20:.1f} MiB), {self.kafka_records} Kafka records, "
            f"{self.parquet_values} Parquet values, {self.decompressed_state_files} LZ4 state files: "
            f"{len(self.leaks)} leaks, {len(self.chance)} chance matches of packed forms in compressed data"
        )


def packed_forms(ips: Iterable[str]) -> dict[bytes, tuple[str, str]]:
    """Each IPv4 address's 4-byte forms (network order and little-endian) -> (ip, form)."""
    out: dict[bytes, tuple[str, str]] = {}
    for ip in ips:
        packed = ipaddress.IPv4Address(ip).packed
        out[packed] = (ip, "packed-be")
        out[packed[::-1]] = (ip, "packed-le")
    return out


def entropy(data: bytes) -> float:
    """Shannon entropy in bits per byte."""
    if not data:
        return 0.0
    counts, n = Counter(data), len(data)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def find_in_bytes(
    data: bytes, ips: set[str], where: str, *, base: int = 0, needles: Needles = NO_NEEDLES
) -> tuple[list[Match], list[Match]]:
    """(leaks, chance matches) of ``ips`` and ``needles`` in ``data``; offsets are ``base`` + position."""
    leaks = needles.find(data, where, base=base) + [
        Match(where, base + m.start(), m.group().decode(), "text", len(m.group()))
        for m in DOTTED_QUAD.finditer(data)
        if m.group().decode() in ips
    ]
    chance: list[Match] = []
    for pattern, (ip, form) in packed_forms(ips).items():
        at = data.find(pattern)
        while at >= 0:
            window = data[max(0, at - ENTROPY_WINDOW // 2) : at + ENTROPY_WINDOW // 2]
            match = Match(where, base + at, ip, form, len(pattern))
            (chance if entropy(window) >= HIGH_ENTROPY_BITS else leaks).append(match)
            at = data.find(pattern, at + 1)
    return leaks, chance


def _add(result: ScanResult, leaks: list[Match], chance: list[Match]) -> None:
    result.leaks += leaks
    result.chance += chance


ROCKSDB_TABLE_SUFFIX = ".sst"  # RocksDB's table files, in the views job's state store and its checkpoints
PACKED_BYTES = 4


def _files(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            yield path


def _head(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(len(LZ4_BLOCK_MAGIC))


def _chance_ranges(path: Path, *, lz4: bool, kafka_decoded: bool) -> list[tuple[int, int]]:
    """The byte ranges ``[start, end)`` of ``path`` in which a packed form is chance, not a leak."""
    # Parquet's and lz4-java's files are searched again decoded (every value; the blocks decompressed); their
    # encoded bytes can be regular without being text: bit-packed runs of close numbers spell any 4 bytes sooner
    # or later (a soak's raw file held 198.51.100.105 that way, no value equal to it).
    # RocksDB's table files (the views job's state store) hold LZ4-compressed blocks too, which leave event ids'
    # hex digits as literals beside binary bytes (a 30-minute soak: 12 packed forms, each "…ed3"/"…fd3" and a
    # 0xc6 byte); they are not decoded here, so their packed forms are chance and their text forms are searched
    # as everywhere. The state never holds an address: ingest keeps none.
    if lz4 or path.suffix in (".parquet", ROCKSDB_TABLE_SUFFIX):
        return [(0, 2**63)]  # the whole file
    # Kafka's log segments: the same LZ4 literals in the records of lz4-compressed batches (a 30-minute soak:
    # byte 8,667,344 of pageviews-1's segment, attributes 0x0003, 0 matches in the decoded records): only the
    # compressed batches' records, and only with ``kafka_decoded`` (the module's docstring says why).
    base_offset = segment_base_offset(path)
    if base_offset is None or not kafka_decoded:
        return []
    return compressed_payloads(path, base_offset)


def _packed_within(ranges: list[tuple[int, int]], match: Match) -> bool:
    """Whether ``match`` is a packed form whose 4 bytes lie inside one of ``ranges`` (sorted, disjoint)."""
    at = bisect_right(ranges, match.offset, key=lambda r: r[0]) - 1
    return match.form.startswith("packed") and at >= 0 and match.offset + PACKED_BYTES <= ranges[at][1]


def scan_files(
    root: Path, ips: set[str], result: ScanResult, *, needles: Needles = NO_NEEDLES, kafka_decoded: bool = False
) -> None:
    """Every byte of every regular file under ``root``, in overlapping chunks.

    ``kafka_decoded``: the caller also searches every topic decoded (``scan_kafka``), which makes a packed
    form in a compressed batch of a Kafka log segment a chance match (the module's docstring).
    """
    overlap = max(16, needles.longest)  # a match cut by a chunk boundary is whole in the next chunk
    for path in _files(root):
        result.files += 1
        lz4 = path.stat().st_size > len(LZ4_BLOCK_MAGIC) and _head(path) == LZ4_BLOCK_MAGIC
        ranges = _chance_ranges(path, lz4=lz4, kafka_decoded=kafka_decoded)
        with open(path, "rb") as f:
            offset, tail = 0, b""
            while chunk := f.read(CHUNK):
                data = tail + chunk
                leaks, chance = find_in_bytes(data, ips, str(path), base=offset - len(tail), needles=needles)
                # LZ4 leaves hex text as literals beside binary tokens ("fd3" + 0xc6 packs 198.51.100.102): a
                # packed form in encoded bytes is chance whatever the entropy; the decoded search is the test.
                encoded = [_packed_within(ranges, m) for m in leaks]
                chance += [m for m, is_chance in zip(leaks, encoded, strict=True) if is_chance]
                leaks = [m for m, is_chance in zip(leaks, encoded, strict=True) if not is_chance]
                # A match wholly in the tail was counted with the chunk before; one the chunk boundary cut was not.
                result.leaks += [m for m in leaks if m.offset + m.size > offset]
                result.chance += [m for m in chance if m.offset + m.size > offset]
                result.bytes_scanned += len(chunk)
                offset += len(chunk)
                tail = data[-overlap:]
        if path.suffix == ".parquet":
            scan_parquet(path, ips, result, needles=needles)
        elif lz4:
            result.decompressed_state_files += 1
            decompressed = decompress_lz4_blocks(path.read_bytes())
            _add(result, *find_in_bytes(decompressed, ips, f"{path} (decompressed)", needles=needles))


def _leaves(array: pa.Array) -> Iterator[pa.Array]:
    """The value arrays under a column: lists, maps and structs opened down to their scalars."""
    if isinstance(array, pa.ChunkedArray):
        for chunk in array.chunks:
            yield from _leaves(chunk)
    elif pa.types.is_map(array.type):
        yield from _leaves(array.keys)
        yield from _leaves(array.items)
    elif pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        yield from _leaves(array.flatten())
    elif pa.types.is_struct(array.type):
        for i in range(array.type.num_fields):
            yield from _leaves(array.field(i))
    else:
        yield array


def _text_leaks(values: pa.Array, ips: set[str], needles: Needles, where: str) -> list[Match]:
    """IPs (not inside a longer number) and needles in a column of strings, searched vectorised."""
    found: list[Match] = []
    if ips:
        text = "|".join(re.escape(ip) for ip in sorted(ips))
        pattern = f"(^|[^0-9.])({text})($|[^0-9])"
        hits = pc.match_substring_regex(values, pattern).to_pylist()
        matched = [values[i].as_py() for i, hit in enumerate(hits) if hit]
        found += [Match(where, 0, m.group(2), "text") for v in matched if (m := re.search(pattern, v))]
    for form, (needle, kind) in needles.forms.items():
        hits = pc.match_substring(values, form.decode()).to_pylist()
        found += [Match(f"{where} row {i}", 0, needle, kind) for i, hit in enumerate(hits) if hit]
    return found


def scan_parquet(path: Path, ips: set[str], result: ScanResult, *, needles: Needles = NO_NEEDLES) -> None:
    """Every value of a Parquet file, decoded: text searched (vectorised), bytes searched, integers compared."""
    as_ints = {int(ipaddress.IPv4Address(ip)): ip for ip in ips}
    as_ints |= {int.from_bytes(ipaddress.IPv4Address(ip).packed, "little"): ip for ip in ips}
    table = pq.read_table(path)
    for column in table.column_names:
        for values in _leaves(table.column(column)):
            result.parquet_values += len(values)
            where = f"{path} column {column}"
            kind = values.type
            if pa.types.is_string(kind) or pa.types.is_large_string(kind):
                result.leaks += _text_leaks(values, ips, needles, where)
            elif pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
                for row, item in enumerate(values.to_pylist()):
                    if item:  # sketches: high-entropy bytes
                        _add(result, *find_in_bytes(item, ips, f"{where} row {row}", needles=needles))
            elif pa.types.is_integer(kind) and as_ints:
                in_set = pc.is_in(values, value_set=pa.array(sorted(as_ints), type=pa.int64()))
                for row, hit in enumerate(in_set.to_pylist()):
                    if hit:
                        result.leaks.append(Match(f"{where} row {row}", 0, as_ints[values[row].as_py()], "integer"))


def scan_kafka(
    servers: str, ips: set[str], result: ScanResult, timeout: float = 60.0, *, needles: Needles = NO_NEEDLES
) -> None:
    """Every record (key, value, headers) of every topic, as a consumer receives it: decompressed."""
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"leak-scan-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_uncommitted",
        }
    )
    try:
        topics = consumer.list_topics(timeout=10).topics
        ends = {}
        for topic, meta in topics.items():
            for p in meta.partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                if high > low:
                    ends[(topic, p)] = (low, high)
        consumer.assign([TopicPartition(t, p, low) for (t, p), (low, _) in ends.items()])
        pending = set(ends)
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=5000, timeout=0.5):
                key = (msg.topic() or "", msg.partition() or 0)
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        pending.discard(key)
                    continue
                result.kafka_records += 1
                parts: list[bytes] = [msg.key() or b"", msg.value() or b""]
                headers = msg.headers() or []
                pairs = headers.items() if isinstance(headers, dict) else headers
                parts += [v.encode() if isinstance(v, str) else v or b"" for _name, v in pairs]
                for part in parts:
                    where = f"kafka {key[0]}/{key[1]}@{msg.offset()}"
                    _add(result, *find_in_bytes(part, ips, where, needles=needles))
                if (msg.offset() or 0) + 1 >= ends[key][1]:
                    pending.discard(key)
        assert not pending, f"could not read {sorted(pending)} to the end within {timeout:.0f}s"
    finally:
        consumer.close()


def scan_at_rest(
    home: Path,
    ips: set[str],
    kafka_servers: str | None,
    *,
    kafka_timeout: float = 60.0,
    needles: Iterable[str] = (),
) -> ScanResult:
    """Search everything under ``home`` (and the topics of a running broker, read to the end
    within ``kafka_timeout`` seconds) for ``ips`` and ``needles``; without ``kafka_servers``, a packed
    form in a compressed batch of a log segment is a leak (the module's docstring)."""
    result = ScanResult()
    planted = Needles.of(needles)
    scan_files(home, ips, result, needles=planted, kafka_decoded=bool(kafka_servers))
    if kafka_servers:
        scan_kafka(kafka_servers, ips, result, timeout=kafka_timeout, needles=planted)
    return result
