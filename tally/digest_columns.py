"""Whole columns of t-digests at once: the Spark job's digest builder, byte-identical to ``tally.sketches``.

A minute's page loads are a few values per list, so building each list's digest by its own numpy
call chain costs far more than the values do. Here one sort of the whole flattened column and one
scatter of bytes build every exact digest of an Arrow batch (the layout is ``tally.sketches``').
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tally.sketches import (
    COMPRESSION,
    DIGEST_HEADER,
    DIGEST_HEADER_DTYPE,
    DIGEST_MAGIC,
    DIGEST_VERSION,
    BoolArray,
    FloatArray,
    digest_from_counts,
    digest_from_values,
)


@dataclass(frozen=True)
class PackedDigests:
    """Serialized t-digests end to end, as an Arrow binary array stores them.

    Digest ``i`` is ``data[offsets[i]:offsets[i + 1]]`` where ``valid[i]``, else null (an empty list).
    """

    offsets: npt.NDArray[np.int32]
    data: npt.NDArray[np.uint8]
    valid: BoolArray

    def to_list(self) -> list[bytes | None]:
        raw = self.data.tobytes()
        o = self.offsets
        return [raw[o[i] : o[i + 1]] if self.valid[i] else None for i in range(self.valid.size)]


def digests_from_lists(
    values: npt.ArrayLike, offsets: npt.ArrayLike, *, compression: float = COMPRESSION
) -> PackedDigests:
    """One serialized t-digest per list of a flattened list column (null for an empty list).

    ``values`` holds every list's values end to end and ``offsets`` the ``len + 1`` list
    boundaries, as an Arrow list array stores them. Each digest is byte-identical to
    ``digest_from_values`` of its list, but a list of few distinct values (the usual case for a
    minute's page loads) is not built by a numpy call chain of its own: such a digest is exact,
    its sorted distinct values with their counts, so one sort of the whole column and a scatter
    of its bytes build all of them at once.
    """
    data = np.asarray(values, dtype=np.float64) + 0.0  # -0.0 becomes 0.0, as digest_from_values does
    bounds = np.asarray(offsets, dtype=np.int64)
    lists = bounds.size - 1
    assert lists >= 0 and (lists == 0 or bounds[-1] - bounds[0] == data.size), "offsets must span the values"
    lengths = np.diff(bounds)
    if not np.all(np.isfinite(data)):
        # Rare: NaN is dropped and infinity refused exactly as digest_from_values does, list by list.
        starts = bounds[:-1] - bounds[0]
        one_by_one = [_digest_of(data[a : a + n], compression) for a, n in zip(starts, lengths, strict=True)]
        return _pack([d for d in one_by_one if d is not None], np.array([d is not None for d in one_by_one]))
    row = np.repeat(np.arange(lists), lengths)
    order = np.lexsort((data, row))
    data, row = data[order], row[order]
    first = np.ones(data.size, np.bool_)
    first[1:] = (row[1:] != row[:-1]) | (data[1:] != data[:-1])
    starts = np.flatnonzero(first)
    uniques, unique_row = data[starts], row[starts]
    counts = np.diff(np.append(starts, data.size)).astype(np.float64)
    distinct = np.bincount(unique_row, minlength=lists)
    exact = (distinct > 0) & (distinct <= compression / 2)
    # Lists with more distinct values are compressed one by one, as digest_from_values does.
    unique_bounds = np.concatenate([[0], np.cumsum(distinct)])
    compressed = {
        int(i): digest_from_counts(
            uniques[unique_bounds[i] : unique_bounds[i + 1]],
            counts[unique_bounds[i] : unique_bounds[i + 1]],
            compression=compression,
        )
        for i in np.flatnonzero(distinct > compression / 2)
    }
    sizes = np.where(exact, DIGEST_HEADER.size + 17 * distinct, 0)
    for i, raw in compressed.items():
        sizes[i] = len(raw)
    out_offsets = np.concatenate([[0], np.cumsum(sizes)])
    out = np.zeros(int(out_offsets[-1]), np.uint8)
    rows = np.flatnonzero(exact)
    headers = np.zeros(rows.size, DIGEST_HEADER_DTYPE)
    headers["magic"], headers["version"], headers["compression"] = DIGEST_MAGIC, DIGEST_VERSION, compression
    headers["n"], headers["count"] = distinct[rows], lengths[rows]
    headers["min"], headers["max"] = uniques[unique_bounds[rows]], uniques[unique_bounds[rows + 1] - 1]
    _scatter(out, out_offsets[rows], headers.view(np.uint8).reshape(rows.size, DIGEST_HEADER.size))
    # Each distinct value of an exact list: its mean, weight and point flag at its place in its digest.
    in_exact = exact[unique_row]
    owner, local = unique_row[in_exact], np.arange(uniques.size)[in_exact] - unique_bounds[unique_row[in_exact]]
    base, n = out_offsets[owner] + DIGEST_HEADER.size, distinct[owner]
    _scatter(out, base + 8 * local, uniques[in_exact].astype("<f8").view(np.uint8).reshape(-1, 8))
    _scatter(out, base + 8 * n + 8 * local, counts[in_exact].astype("<f8").view(np.uint8).reshape(-1, 8))
    out[base + 16 * n + local] = 1
    for i, raw in compressed.items():
        out[out_offsets[i] : out_offsets[i + 1]] = np.frombuffer(raw, np.uint8)
    return PackedDigests(out_offsets.astype(np.int32), out, distinct > 0)


def _scatter(out: npt.NDArray[np.uint8], at: npt.NDArray[np.int64], rows: npt.NDArray[np.uint8]) -> None:
    """Write each row of bytes ``rows[k]`` into ``out`` starting at ``at[k]``."""
    out[at[:, None] + np.arange(rows.shape[1])] = rows


def _pack(digests: list[bytes], valid: BoolArray) -> PackedDigests:
    sizes = np.zeros(valid.size, np.int64)
    sizes[valid] = [len(d) for d in digests]
    data = np.frombuffer(b"".join(digests), np.uint8)
    return PackedDigests(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int32), data, valid)


def _digest_of(values: FloatArray, compression: float) -> bytes | None:
    """``digest_from_values`` of one list, or None when the list holds no value at all."""
    return digest_from_values(values, compression=compression) if values.size else None
