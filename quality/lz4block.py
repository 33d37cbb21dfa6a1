"""Read lz4-java's block stream (``LZ4BlockOutputStream``), the format Spark compresses its
streaming state files with, in pure Python (the project has no lz4 binding; state files are small).

Stream: blocks of a 21-byte header (magic ``LZ4Block``, a token whose high nibble is the method,
compressed length, original length and checksum as little-endian int32) and a body that is raw
(method 0x10) or one LZ4 block (method 0x20); an empty block ends the stream.
"""

from __future__ import annotations

import struct

LZ4_BLOCK_MAGIC = b"LZ4Block"
_HEADER = struct.Struct("<8sBiii")
_RAW, _LZ4 = 0x10, 0x20


def decompress_block(src: bytes, size: int) -> bytes:
    """Decode one LZ4 block (the raw block format, no frame) of ``size`` original bytes."""
    out = bytearray()
    i, n = 0, len(src)
    while i < n:
        token = src[i]
        i += 1
        literals = token >> 4
        if literals == 15:
            while True:
                extra = src[i]
                i += 1
                literals += extra
                if extra != 255:
                    break
        out += src[i : i + literals]
        i += literals
        if i >= n:  # the last sequence has literals only
            break
        distance = src[i] | src[i + 1] << 8
        i += 2
        length = token & 15
        if length == 15:
            while True:
                extra = src[i]
                i += 1
                length += extra
                if extra != 255:
                    break
        length += 4
        start = len(out) - distance
        if distance <= 0 or start < 0:
            raise ValueError(f"corrupt LZ4 block: match distance {distance} at output byte {len(out)}")
        if distance >= length:
            out += out[start : start + length]
        else:  # an overlapping match repeats the last `distance` bytes
            for k in range(length):
                out.append(out[start + k])
    if len(out) != size:
        raise ValueError(f"corrupt LZ4 block: {len(out)} bytes decoded, the header says {size}")
    return bytes(out)


def decompress_lz4_blocks(data: bytes) -> bytes:
    """The original bytes of a whole lz4-java block stream (concatenated streams included)."""
    out = bytearray()
    i = 0
    while i + _HEADER.size <= len(data):
        magic, token, compressed, original, _checksum = _HEADER.unpack_from(data, i)
        if magic != LZ4_BLOCK_MAGIC:
            raise ValueError(f"not an lz4-java block stream at byte {i}")
        i += _HEADER.size
        body = data[i : i + compressed]
        i += compressed
        method = token & 0xF0
        if method == _RAW:
            out += body
        elif method == _LZ4:
            out += decompress_block(body, original)
        else:
            raise ValueError(f"unknown lz4-java compression method {method:#x} at byte {i}")
    return bytes(out)
