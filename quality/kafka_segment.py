"""Find where a Kafka broker's log segment files hold compressed records, from the batch headers alone.

This reads the files a broker keeps in its log dirs (``quality.kafka_log`` reads a topic through a
consumer instead): ``<log dir>/<topic>-<partition>/<base offset, 20 digits>.log``, a run of record
batches (format v2, magic 2; Kafka's ``DefaultRecordBatch``). Each batch opens with a 61-byte
big-endian header:

    baseOffset int64, batchLength int32, partitionLeaderEpoch int32, magic int8, crc uint32,
    attributes int16, lastOffsetDelta int32, baseTimestamp int64, maxTimestamp int64,
    producerId int64, producerEpoch int16, baseSequence int32, recordCount int32

and then its records, compressed as a whole by the codec ``attributes & 0x7`` (0 none, 1 gzip,
2 snappy, 3 lz4, 4 zstd). A batch spans 12 + batchLength bytes from its start, so the walk jumps
from header to header and decompresses nothing. It stops at the first header that is not a v2
batch's, names an offset below the one before, an unknown codec, or does not fit in the file
(a torn tail, a preallocated segment's zeros, an older message format, garbage): the bytes from
there on are not known to be compressed.
"""

from __future__ import annotations

import re
from pathlib import Path
from struct import Struct

BATCH_HEADER = Struct(">qiibIhiqqqhii")
LOG_OVERHEAD = 12  # bytes of baseOffset and batchLength (Kafka's name): batchLength counts the bytes after them
MAGIC_V2 = 2
CODEC_MASK = 0x7
KNOWN_CODECS = range(5)  # none, gzip, snappy, lz4, zstd
SEGMENT_NAME = re.compile(r"[0-9]{20}\.log")
# Not "<topic>-<n>.<id>-delete" nor "-future", nor the KRaft metadata log: no consumer reads those.
PARTITION_DIR = re.compile(r"(?!__cluster_metadata-).+-[0-9]+")


def segment_base_offset(path: Path) -> int | None:
    """The base offset of a file named as a broker names a log segment (``<topic>-<n>/<20 digits>.log``);
    None for any other name (``.log.deleted``, ``.index``, a partition directory being deleted)."""
    if SEGMENT_NAME.fullmatch(path.name) and PARTITION_DIR.fullmatch(path.parent.name):
        return int(path.stem)
    return None


def compressed_payloads(path: Path, base_offset: int) -> list[tuple[int, int]]:
    """The byte ranges ``[start, end)`` of the compressed batches' records in the log segment ``path``
    (whose name says ``base_offset``), in file order, up to the first header that does not parse."""
    size = path.stat().st_size
    payloads: list[tuple[int, int]] = []
    next_offset, start = base_offset, 0  # no batch holds an offset below the segment's base offset
    with open(path, "rb") as f:
        while True:
            f.seek(start)
            header = f.read(BATCH_HEADER.size)
            if len(header) < BATCH_HEADER.size:  # the file's end, or a header cut short
                break
            first, length, _epoch, magic, _crc, attributes, last_delta, *_ = BATCH_HEADER.unpack(header)
            end = start + LOG_OVERHEAD + length
            codec = attributes & CODEC_MASK
            parsed = magic == MAGIC_V2 and first >= next_offset and last_delta >= 0 and codec in KNOWN_CODECS
            if not parsed or not start + BATCH_HEADER.size <= end <= size:
                break
            if codec:
                payloads.append((start + BATCH_HEADER.size, end))
            next_offset, start = first + last_delta + 1, end
    return payloads
