"""Mergeable sketches for the aggregate views: t-digests for quantiles, HLL helpers for distinct counts.

Pure domain code (numpy and ``datasketches`` only), fast enough to call from Spark pandas UDFs.

**t-digest.** A merging t-digest (Dunning's MergingDigest) with the k1 (arcsine) scale function
``k(q) = δ / (2π) · asin(2q − 1)``: a centroid may span at most one unit of k, so centroids are
small near the tails and large near the median. Building and merging are deterministic: inputs are
sorted before the single greedy compression pass, so the same multiset of values (or of digests)
gives byte-identical output in any order. Two refinements over the textbook version, both lossless:

- A centroid whose inputs all had the same value is flagged as a *point mass*. Equal point masses
  are coalesced before compression (raw duplicates first), and quantiles inside a point mass return
  its value exactly instead of interpolating across it. Without this, heavily tied data (scroll
  depth 0..100, pages per session) reads ~1% off in rank at the median.
- The exact minimum and maximum are kept, so p0 and p100 are exact.

Serialized layout (little-endian, 40-byte header then three arrays, ``n`` centroids sorted by mean)::

    offset  size  field
    0       3     magic b"TDG"
    3       1     format version (1)
    4       4     n, uint32: number of centroids
    8       8     compression δ, float64
    16      8     count, uint64: number of values (equals the sum of the weights)
    24      8     min, float64 (NaN when count is 0)
    32      8     max, float64 (NaN when count is 0)
    40      8n    centroid means, float64
    40+8n   8n    centroid weights, float64 (whole numbers)
    40+16n  n     point-mass flags, uint8 (1: every value in the centroid equals its mean)

**HLL.** Distinct counts use Apache DataSketches HLL sketches, the format Spark's ``hll_sketch_agg``
writes, at lgConfigK ``HLL_LG_K``. Distinct counts are never added: sketches are unioned. A union
of sketches of different lg_k is taken at the smallest lg_k among them, and its bounds are that
lg_k's (tables written before a change of ``HLL_LG_K`` keep their sketches until a backfill).
``TALLY_HLL_LG_K`` overrides ``HLL_LG_K`` for a process (read once, at import): the precision
benchmark (``bench/precision.py``) writes warehouses at each lg_k with it.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import datasketches
import numpy as np
import numpy.typing as npt

COMPRESSION = 200.0
# Register count 2**lg_k: the composite estimator's 2-sigma bound is ≈ 2 × 1.04 / sqrt(2**lg_k),
# ±3.2% at 12 and ±1.6% at 14 (docs/BENCHMARKS.md, "Precision", measures both).
DEFAULT_HLL_LG_K = 14
HLL_LG_K_RANGE = range(4, 22)  # what both DataSketches and Spark's hll_sketch_agg accept

# A serialized digest: this header (magic, version, centroids n, compression, count, min, max),
# then n means (<f8), n weights (<f8) and n point flags (u1). DIGEST_HEADER_DTYPE is the same
# header as a numpy record, for code that writes many digests at once (tally.digest_columns).
DIGEST_MAGIC = b"TDG"
DIGEST_VERSION = 1
DIGEST_HEADER = struct.Struct("<3sBIdQdd")
DIGEST_HEADER_DTYPE = np.dtype(
    [
        ("magic", "S3"),
        ("version", "u1"),
        ("n", "<u4"),
        ("compression", "<f8"),
        ("count", "<u8"),
        ("min", "<f8"),
        ("max", "<f8"),
    ]
)
assert DIGEST_HEADER_DTYPE.itemsize == DIGEST_HEADER.size
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def hll_lg_k_from_environment() -> int:
    """``TALLY_HLL_LG_K`` if set (a benchmark's choice), else ``DEFAULT_HLL_LG_K``."""
    text = os.environ.get("TALLY_HLL_LG_K", "").strip()
    if not text:
        return DEFAULT_HLL_LG_K
    if not text.isdigit() or int(text) not in HLL_LG_K_RANGE:
        raise ValueError(
            f"TALLY_HLL_LG_K={text!r} is not an HLL lg_k: use a whole number from {HLL_LG_K_RANGE.start}"
            f" to {HLL_LG_K_RANGE.stop - 1} (Tally's default is {DEFAULT_HLL_LG_K}), or unset it"
        )
    return int(text)


HLL_LG_K = hll_lg_k_from_environment()


@dataclass(frozen=True)
class _Digest:
    """A t-digest in memory: centroids sorted by mean, plus the exact extremes."""

    compression: float
    count: int
    min: float
    max: float
    means: FloatArray
    weights: FloatArray
    points: BoolArray

    def to_bytes(self) -> bytes:
        """Serialize in the layout documented in the module docstring."""
        header = DIGEST_HEADER.pack(
            DIGEST_MAGIC, DIGEST_VERSION, len(self.means), self.compression, self.count, self.min, self.max
        )
        arrays = (self.means.astype("<f8"), self.weights.astype("<f8"), self.points.astype(np.uint8))
        return header + b"".join(a.tobytes() for a in arrays)

    @classmethod
    def from_bytes(cls, raw: bytes, *, verify: bool = True) -> _Digest:
        """Parse and check a serialized digest; ValueError if ``raw`` is not one.

        ``verify=False`` checks only the header and length; callers that parse many digests at
        once (``merge_digests``) check the concatenated centroids in one go instead.
        """
        if len(raw) < DIGEST_HEADER.size or raw[:3] != DIGEST_MAGIC:
            raise ValueError(
                f"not a Tally t-digest ({len(raw)} bytes, starts {raw[:4]!r}); expected magic {DIGEST_MAGIC!r}"
            )
        _, version, n, compression, count, lo, hi = DIGEST_HEADER.unpack_from(raw)
        if version != DIGEST_VERSION:
            raise ValueError(f"t-digest format version {version} is not supported (this code reads {DIGEST_VERSION})")
        if len(raw) != DIGEST_HEADER.size + 17 * n:
            need = DIGEST_HEADER.size + 17 * n
            raise ValueError(f"corrupt t-digest: {n} centroids need {need} bytes, got {len(raw)}")
        means = np.frombuffer(raw, "<f8", n, DIGEST_HEADER.size).astype(np.float64)
        weights = np.frombuffer(raw, "<f8", n, DIGEST_HEADER.size + 8 * n).astype(np.float64)
        points = np.frombuffer(raw, np.uint8, n, DIGEST_HEADER.size + 16 * n).astype(np.bool_)
        if not verify:
            return cls(compression, count, lo, hi, means, weights, points)
        sorted_finite = bool(np.all(np.isfinite(means)) and np.all(np.diff(means) >= 0))
        if weights.sum() != count or np.any(weights <= 0) or not sorted_finite:
            raise ValueError("corrupt t-digest: means must be finite and sorted, weights positive and sum to the count")
        return cls(compression, count, lo, hi, means, weights, points)


def digest_from_values(values: npt.ArrayLike | Sequence[float | None], *, compression: float = COMPRESSION) -> bytes:
    """Build a serialized t-digest from raw values, ignoring NaN and None.

    Infinite values raise ValueError: they would poison every centroid mean, so filter or cap them first.
    """
    data = np.asarray(values, dtype=np.float64).ravel()
    data = data[~np.isnan(data)] + 0.0  # -0.0 becomes 0.0: which of the equal two a sort keeps is arbitrary
    if not np.all(np.isfinite(data)):
        raise ValueError("t-digest input has infinite values; filter or cap them before building a digest")
    if data.size == 0:
        return _empty(compression).to_bytes()
    # np.unique sorts, and turns each run of duplicates into one weighted point mass.
    uniques, counts = np.unique(data, return_counts=True)
    return digest_from_counts(uniques, counts.astype(np.float64), compression=compression)


def digest_from_counts(uniques: FloatArray, counts: FloatArray, *, compression: float = COMPRESSION) -> bytes:
    """A serialized t-digest of sorted distinct finite values, each seen ``counts`` times (at least one value)."""
    return _compress(uniques, counts, np.ones(uniques.size, np.bool_), compression).to_bytes()


def merge_digests(digests: Iterable[bytes | None]) -> bytes | None:
    """Merge serialized t-digests (None and b"" are skipped); None if there was nothing to merge.

    The result does not depend on the order of the inputs. Its compression is the largest of theirs.
    """
    parsed = [_Digest.from_bytes(raw, verify=False) for raw in digests if raw]
    if not parsed:
        return None
    compression = max(d.compression for d in parsed)
    full = [d for d in parsed if d.count]
    if not full:
        return _empty(compression).to_bytes()
    means = np.concatenate([d.means for d in full])
    weights = np.concatenate([d.weights for d in full])
    points = np.concatenate([d.points for d in full])
    order = np.lexsort((points, weights, means))  # stable: equal keys are interchangeable
    means, weights, points = means[order], weights[order], points[order]
    if not np.all(np.isfinite(means)) or np.any(weights <= 0) or weights.sum() != sum(d.count for d in full):
        raise ValueError(
            "corrupt t-digest among the inputs: means must be finite, weights positive and sum to the count"
        )
    # Coalesce equal point masses first (lossless), as digest_from_values does for raw duplicates.
    first = np.ones(means.size, np.bool_)
    first[1:] = ~(points[1:] & points[:-1] & (means[1:] == means[:-1]))
    starts = np.flatnonzero(first)
    means, weights = means[starts], np.add.reduceat(weights, starts)
    points = np.minimum.reduceat(points, starts)
    digest = _compress(means, weights, points, compression)
    lo, hi = min(d.min for d in full), max(d.max for d in full)
    return _Digest(compression, digest.count, lo, hi, digest.means, digest.weights, digest.points).to_bytes()


def digest_quantiles(digest: bytes, qs: Sequence[float]) -> list[float]:
    """Estimated quantiles (each q in [0, 1]) of a serialized digest; NaN for an empty digest.

    Interpolates linearly in rank between centroid means, as the reference t-digest does, from the
    exact min at rank 0 to the exact max at rank n; a point mass holds its value over its whole rank range.
    """
    parsed = _Digest.from_bytes(digest)
    q = np.asarray(qs, dtype=np.float64)
    if np.any(~((q >= 0) & (q <= 1))):
        raise ValueError(f"quantiles must be in [0, 1], got {list(qs)}")
    if parsed.count == 0:
        return [math.nan] * q.size
    ranks, values = _anchors(parsed)
    index = q * parsed.count
    j = np.clip(np.searchsorted(ranks, index, side="right") - 1, 0, ranks.size - 2)
    span = ranks[j + 1] - ranks[j]
    t = np.clip((index - ranks[j]) / np.where(span > 0, span, 1.0), 0.0, 1.0)
    estimates = values[j] + t * (values[j + 1] - values[j])
    estimates = np.where(q <= 0, parsed.min, np.where(q >= 1, parsed.max, estimates))
    return [float(x) for x in estimates]


def digest_count(digest: bytes) -> int:
    """Number of values summarised by a serialized digest."""
    return _Digest.from_bytes(digest).count


def _empty(compression: float) -> _Digest:
    """A digest of no values."""
    nothing = np.empty(0, np.float64)
    return _Digest(compression, 0, math.nan, math.nan, nothing, nothing, np.empty(0, np.bool_))


def _compress(means: FloatArray, weights: FloatArray, points: BoolArray, compression: float) -> _Digest:
    """Group weighted points sorted by mean into centroids (MergingDigest with the k1 scale), vectorised.

    Each point falls in the unit interval of k that holds the middle of its rank range; runs of points
    in the same interval form one centroid, so a centroid spans about one unit of k. Repeated values
    (point masses of weight > 1) stay centroids of their own, so ties keep exact quantiles. Few
    enough points are kept as they are: that is exact and no larger than a compressed digest.
    """
    cumulative = np.cumsum(weights)
    total = float(cumulative[-1])
    if means.size <= compression / 2:
        return _Digest(compression, round(total), float(means[0]), float(means[-1]), means, weights, points)
    scale = compression / (2 * math.pi)
    middle = (cumulative - weights / 2) / total
    bucket = np.floor(scale * np.arcsin(np.clip(2 * middle - 1, -1.0, 1.0)))
    alone = points & (weights > 1)
    first = np.ones(means.size, np.bool_)
    first[1:] = (bucket[1:] != bucket[:-1]) | alone[1:] | alone[:-1]
    bounds = np.flatnonzero(first)
    sums = np.add.reduceat(weights, bounds)
    lows, highs = np.minimum.reduceat(means, bounds), np.maximum.reduceat(means, bounds)
    centroid_means = np.clip(np.add.reduceat(weights * means, bounds) / sums, lows, highs)
    centroid_points = np.minimum.reduceat(points, bounds) & (lows == highs)
    centroid_means = np.where(centroid_points, lows, centroid_means)
    return _Digest(compression, round(total), float(means[0]), float(means[-1]), centroid_means, sums, centroid_points)


def _anchors(digest: _Digest) -> tuple[FloatArray, FloatArray]:
    """(rank, value) knots of the piecewise-linear quantile function, ranks non-decreasing.

    A spread centroid is one knot at its centre rank; a point mass is two knots, at both ends of its
    rank range. One value is known to sit at the min and one at the max, hence rank 1 and n − 1.
    """
    right = np.cumsum(digest.weights)
    left = right - digest.weights
    centre = left + digest.weights / 2
    pts = digest.points
    knot_ranks = np.stack([np.where(pts, left, centre), np.where(pts, right, centre)], axis=1).ravel()
    knot_values = np.repeat(digest.means, 2)
    keep = np.stack([np.ones_like(pts), pts], axis=1).ravel()
    ranks, values = [np.array([0.0])], [np.array([digest.min])]
    if not pts[0] and centre[0] > 1:
        ranks.append(np.array([1.0]))
        values.append(np.array([digest.min]))
    ranks.append(knot_ranks[keep])
    values.append(knot_values[keep])
    n = float(digest.count)
    if not pts[-1] and centre[-1] < n - 1:
        ranks.append(np.array([n - 1]))
        values.append(np.array([digest.max]))
    ranks.append(np.array([n]))
    values.append(np.array([digest.max]))
    return np.concatenate(ranks), np.concatenate(values)


@dataclass(frozen=True)
class Estimate:
    """An approximate count with its 2-standard-deviation (≈95%) bounds."""

    value: float
    lower: float
    upper: float

    @property
    def relative_error(self) -> float:
        """Half the width of the bounds, relative to the value (0 when the value is 0)."""
        return (self.upper - self.lower) / 2 / self.value if self.value else 0.0

    def label(self) -> str:
        """Human-readable form, always marked approximate, e.g. "≈ 12,340 ± 1.6%"."""
        percent = self.relative_error * 100
        shown = "<0.1" if 0 < percent < 0.05 else f"{percent:.1f}"
        return f"≈ {self.value:,.0f} ± {shown}%"


def union_estimate(sketches: Iterable[bytes | None]) -> Estimate:
    """Distinct count of the union of serialized HLL sketches (None and b"" are skipped).

    The estimate depends only on the union's registers, never on how the values were split into
    sketches. A sketch built by plain updates answers with its HIP estimator, while a union of two or
    more HLL-mode sketches can only use the composite estimator, which has a little more error
    (≈1.04 vs ≈0.83 over sqrt(2**lg_k) standard error). A union of a *single* sketch keeps HIP, so
    the union is finally merged with its own result: that changes no register (max is idempotent) but
    marks the registers out of order, which selects the composite estimator every time. Thus a day's
    visitors read the same from one sketch as from the union of its 24 hourly sketches.

    Sketches of different lg_k (tables written before ``HLL_LG_K`` changed) are unioned at the
    smallest lg_k among them, so the bounds are the ones that hold for it: a union of lg_k 12 and
    lg_k 14 sketches says ±3.2%, not ±1.6%. (A sketch still in its exact list or set mode keeps
    every hash bit, so it lowers nothing.)
    """
    parsed = []
    for raw in sketches:
        if not raw:
            continue
        try:
            parsed.append(datasketches.hll_sketch.deserialize(bytes(raw)))
        except (ValueError, RuntimeError) as e:
            raise ValueError(f"not a DataSketches HLL sketch ({len(raw)} bytes): {e}") from e
    # A union made for a smaller lg_k than an input's reports bounds narrower than its registers
    # hold; made for the largest, it goes down to the smallest input's lg_k by itself.
    union = datasketches.hll_union(max((s.lg_config_k for s in parsed), default=HLL_LG_K))
    for sketch in parsed:
        union.update(sketch)
    union.update(union.get_result())
    return Estimate(union.get_estimate(), union.get_lower_bound(2), union.get_upper_bound(2))


def sketch_from_ids(ids: Iterable[str], *, lg_k: int = HLL_LG_K) -> bytes:
    """A compact HLL_4 sketch of the given ids (lg_k ``HLL_LG_K`` unless given, as Spark's ``hll_sketch_agg``)."""
    sketch = datasketches.hll_sketch(lg_k, datasketches.tgt_hll_type.HLL_4)
    update = sketch.update
    for visitor_id in ids:
        update(visitor_id)
    return bytes(sketch.serialize_compact())
