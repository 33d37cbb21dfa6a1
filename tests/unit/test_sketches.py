"""Accuracy and determinism of the shared sketches: t-digest quantiles and HLL distinct counts."""

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tally.sketches import (
    DEFAULT_HLL_LG_K,
    HLL_LG_K,
    Estimate,
    digest_count,
    digest_from_values,
    digest_quantiles,
    hll_lg_k_from_environment,
    merge_digests,
    sketch_from_ids,
    union_estimate,
)

QUANTILES = (0.5, 0.9, 0.99)
MAX_RANK_ERROR = 0.005
HLL_STANDARD_ERROR = 1.04 / np.sqrt(2**HLL_LG_K)  # of the composite estimator: ≈ 0.81% at lg_k 14, 1.6% at 12

Generator = Callable[[np.random.Generator, int], np.ndarray]
DISTRIBUTIONS: dict[str, Generator] = {
    "uniform": lambda rng, n: rng.uniform(0, 1, n),
    "page load ms (lognormal)": lambda rng, n: rng.lognormal(np.log(1200), 0.8, n),
    "engagement s (exponential)": lambda rng, n: rng.exponential(45, n),
    "heavy ties (integers 0..50)": lambda rng, n: rng.integers(0, 51, n).astype(np.float64),
}


def rank_error(exact_sorted: np.ndarray, estimate: float, q: float) -> float:
    """Distance from q to the empirical CDF at the estimate.

    With ties the CDF jumps at a repeated value, so the estimate is exact when q falls anywhere in
    [P(X < estimate), P(X <= estimate)]; for distinct values this is |CDF(estimate) − q|.
    """
    n = exact_sorted.size
    below = np.searchsorted(exact_sorted, estimate, side="left") / n
    at_or_below = np.searchsorted(exact_sorted, estimate, side="right") / n
    return max(0.0, below - q, q - at_or_below)


def worst_rank_error(exact_sorted: np.ndarray, digest: bytes) -> float:
    """Largest rank error of the digest's p50, p90 and p99."""
    estimates = digest_quantiles(digest, QUANTILES)
    return max(rank_error(exact_sorted, x, q) for x, q in zip(estimates, QUANTILES, strict=True))


def random_chunks(rng: np.random.Generator, values: np.ndarray) -> list[np.ndarray]:
    """Split values into 10 to 100 contiguous chunks of random sizes."""
    chunks = int(rng.integers(10, 101))
    cuts = np.sort(rng.choice(np.arange(1, values.size), chunks - 1, replace=False))
    return np.split(values, cuts)


@pytest.mark.parametrize("n", [1_000, 100_000, 1_000_000])
@pytest.mark.parametrize("distribution", sorted(DISTRIBUTIONS))
def test_digest_quantiles_are_within_half_a_percent_in_rank_built_whole_or_merged_from_chunks(
    distribution: str, n: int
) -> None:
    rng = np.random.default_rng(20_240_611)
    values = DISTRIBUTIONS[distribution](rng, n)
    exact = np.sort(values)
    whole = digest_from_values(values)
    assert digest_count(whole) == n
    assert worst_rank_error(exact, whole) <= MAX_RANK_ERROR

    chunk_digests = [digest_from_values(chunk) for chunk in random_chunks(rng, values)]
    merged = merge_digests(chunk_digests)
    assert merged is not None and digest_count(merged) == n
    assert worst_rank_error(exact, merged) <= MAX_RANK_ERROR
    shuffled = [chunk_digests[i] for i in rng.permutation(len(chunk_digests))]
    assert merge_digests(shuffled) == merged

    # Per-page style chunks, each covering its own value range, then a second level of merging.
    skewed = [digest_from_values(chunk) for chunk in random_chunks(rng, exact)]
    daily = [merge_digests(skewed[i : i + 7]) for i in range(0, len(skewed), 7)]
    monthly = merge_digests(daily)
    assert monthly is not None and worst_rank_error(exact, monthly) <= MAX_RANK_ERROR


def test_the_same_values_in_any_order_give_byte_identical_digests() -> None:
    values = np.random.default_rng(1).lognormal(7, 1, 50_000)
    assert digest_from_values(values) == digest_from_values(values[::-1])
    assert digest_from_values(values) == digest_from_values(list(np.random.default_rng(2).permutation(values)))


def test_nan_and_none_are_ignored_and_extremes_are_exact() -> None:
    digest = digest_from_values([3.0, None, 1.5, float("nan"), 40.0, 7.25])
    assert digest_count(digest) == 4
    assert digest_quantiles(digest, [0.0, 1.0]) == [1.5, 40.0]


def test_a_digest_of_nothing_counts_zero_and_has_no_quantiles() -> None:
    empty = digest_from_values([float("nan")])
    assert digest_count(empty) == 0
    assert all(np.isnan(digest_quantiles(empty, [0.5])))
    assert merge_digests([empty, None]) == empty
    assert merge_digests([None, b""]) is None
    assert merge_digests([]) is None


def test_merging_skips_missing_and_empty_digests() -> None:
    digest = digest_from_values(np.arange(1_000.0))
    merged = merge_digests([None, digest, digest_from_values([]), None])
    assert merged is not None and digest_count(merged) == 1_000
    assert digest_quantiles(merged, [0.5]) == pytest.approx(digest_quantiles(digest, [0.5]), abs=1)


def test_infinite_values_are_rejected_with_a_hint() -> None:
    with pytest.raises(ValueError, match="filter or cap"):
        digest_from_values([1.0, float("inf")])


@pytest.mark.parametrize(
    ("raw", "message"),
    [(b"not a digest at all, but long enough to hold a header", "not a Tally t-digest"), (b"TDG", "not a Tally")],
)
def test_bytes_that_are_not_a_digest_are_rejected(raw: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        digest_quantiles(raw, [0.5])


def test_truncated_or_newer_digests_are_rejected() -> None:
    digest = digest_from_values(np.arange(100.0))
    with pytest.raises(ValueError, match="corrupt"):
        digest_count(digest[:-1])
    with pytest.raises(ValueError, match="version 9"):
        digest_count(digest[:3] + bytes([9]) + digest[4:])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        digest_quantiles(digest, [1.5])


@given(st.lists(st.floats(-1e9, 1e9), min_size=1, max_size=300), st.integers(1, 8))
def test_digests_merge_in_any_order_and_keep_count_min_and_max(values: list[float], parts: int) -> None:
    chunks = [values[i::parts] for i in range(parts)]
    digests = [digest_from_values(chunk) for chunk in chunks]
    merged = merge_digests(digests)
    assert merged is not None
    assert merge_digests(digests[::-1]) == merged
    assert digest_count(merged) == len(values)
    low, mid, high = digest_quantiles(merged, [0.0, 0.5, 1.0])
    assert (low, high) == (min(values), max(values))
    assert low <= mid <= high


@pytest.mark.parametrize("n", [10, 100, 1_000, 10_000, 100_000, 1_000_000])
def test_unique_visitor_estimates_are_within_three_standard_errors(n: int) -> None:
    estimate = union_estimate([sketch_from_ids(f"visitor-{i}" for i in range(n))])
    assert abs(estimate.value - n) <= 3 * HLL_STANDARD_ERROR * n
    half_width = (estimate.upper - estimate.lower) / 2  # the sketch's own 2σ bounds, stretched to 3σ
    assert estimate.lower - half_width / 2 <= n <= estimate.upper + half_width / 2
    if n <= 100:  # small sets are kept as exact coupon lists
        assert round(estimate.value) == n


def test_about_95_percent_of_unique_visitor_estimates_fall_within_two_standard_errors() -> None:
    # A 2σ bound misses about 1 time in 20 by design, so it is tested over many independent id sets.
    inside_bounds, inside_error, cases = 0, 0, 0
    for trial in range(12):
        for n in (1_000, 10_000, 100_000):
            estimate = union_estimate([sketch_from_ids(f"visitor-{trial}-{i}" for i in range(n))])
            inside_bounds += estimate.lower <= n <= estimate.upper
            inside_error += abs(estimate.value - n) <= 2 * HLL_STANDARD_ERROR * n
            cases += 1
    assert inside_bounds / cases >= 0.85
    assert inside_error / cases >= 0.85


def test_the_union_of_overlapping_sketches_counts_each_visitor_once() -> None:
    n = 200_000
    ids = [f"visitor-{i}" for i in range(n)]
    rng = np.random.default_rng(5)
    samples = [rng.choice(n, 60_000, replace=False) for _ in range(6)]
    parts = [ids[:120_000], ids[80_000:], ids[50_000:150_000], *[[ids[i] for i in s] for s in samples]]
    union = union_estimate(sketch_from_ids(part) for part in parts)
    assert abs(union.value - n) <= 3 * HLL_STANDARD_ERROR * n
    # The same visitors give the same registers however they were split, hence the same estimate.
    assert union == union_estimate([sketch_from_ids(ids)])
    assert union == union_estimate([sketch_from_ids(ids[::2]), None, sketch_from_ids(ids[1::2])])


def test_union_estimate_of_nothing_is_zero() -> None:
    assert union_estimate([]) == Estimate(0.0, 0.0, 0.0)
    assert union_estimate([None, b""]).value == 0.0


def test_sketches_that_are_not_hll_are_rejected() -> None:
    with pytest.raises(ValueError, match="not a DataSketches HLL sketch"):
        union_estimate([b"garbage"])


def test_tally_sketches_at_lg_k_14_unless_a_run_asks_for_another(monkeypatch: pytest.MonkeyPatch) -> None:
    assert DEFAULT_HLL_LG_K == 14
    monkeypatch.delenv("TALLY_HLL_LG_K", raising=False)
    assert hll_lg_k_from_environment() == 14
    monkeypatch.setenv("TALLY_HLL_LG_K", "12")
    assert hll_lg_k_from_environment() == 12
    for bad in ("twelve", "3", "22", "-12"):
        monkeypatch.setenv("TALLY_HLL_LG_K", bad)
        with pytest.raises(ValueError, match=f"TALLY_HLL_LG_K='{bad}'"):
            hll_lg_k_from_environment()


def two_sigma_bound(lg_k: int) -> float:
    """The composite estimator's 2-sigma relative bound at ``lg_k``: ±3.2% at 12, ±1.6% at 14."""
    return 2 * 1.04 / 2 ** (lg_k / 2)


def test_a_union_of_lg_k_12_and_14_sketches_reports_the_bound_of_lg_k_12() -> None:
    # Days written before the switch to lg_k 14 hold lg_k 12 sketches until a backfill brings them over.
    n = 100_000
    old_days = sketch_from_ids((f"visitor-{i}" for i in range(n)), lg_k=12)
    new_days = sketch_from_ids((f"visitor-{i}" for i in range(n, 2 * n)), lg_k=14)
    mixed = union_estimate([new_days, old_days])
    assert mixed.relative_error == pytest.approx(two_sigma_bound(12), rel=0.02)
    assert mixed.label().endswith("± 3.2%")
    # Folding lg_k 14 registers into lg_k 12 ones loses nothing more: the union reads exactly as if
    # every day had been sketched at lg_k 12, whatever the order.
    every_id = [f"visitor-{i}" for i in range(2 * n)]
    assert mixed == union_estimate([sketch_from_ids(every_id, lg_k=12)])
    assert union_estimate([old_days, new_days]) == mixed

    only_new = union_estimate([new_days, sketch_from_ids((f"visitor-{i}" for i in range(n)), lg_k=14)])
    assert only_new.relative_error == pytest.approx(two_sigma_bound(14), rel=0.02)
    assert only_new.label().endswith("± 1.6%")
    assert only_new.lower <= 2 * n <= only_new.upper


def test_a_small_lg_k_12_sketch_still_listing_its_ids_keeps_the_precision_of_the_union() -> None:
    # Under a few hundred ids a sketch keeps every id's hash whole (list mode): nothing is lost at lg_k 14.
    few = sketch_from_ids((f"visitor-{i}" for i in range(50)), lg_k=12)
    many = sketch_from_ids((f"visitor-{i}" for i in range(50, 100_050)), lg_k=14)
    assert union_estimate([few, many]).relative_error == pytest.approx(two_sigma_bound(14), rel=0.02)


def test_estimate_labels_are_always_marked_approximate() -> None:
    assert Estimate(12_340.0, 12_340 * 0.984, 12_340 * 1.016).label() == "≈ 12,340 ± 1.6%"
    assert Estimate(10.0, 10.0, 10.001).label() == "≈ 10 ± <0.1%"
    assert Estimate(0.0, 0.0, 0.0).relative_error == 0.0
    assert Estimate(0.0, 0.0, 0.0).label() == "≈ 0 ± 0.0%"
