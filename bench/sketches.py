"""t-digest benchmark: tally.sketches against the pure-Python ``tdigest`` package, side by side.

Build time, merge time of 100 digests and p50/p90/p99 rank error, on lognormal page-load times
(medians of the repeats). The package costs tens of microseconds per value, so it gets a smaller
sample and the comparison is made per value; the table says so.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import operator
import random
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from typing import TypeVar

import numpy as np
from tdigest import TDigest

from bench.report import Figure
from tally.sketches import COMPRESSION, digest_from_values, digest_quantiles, merge_digests

QUANTILES = (0.5, 0.9, 0.99)
_RUNS = itertools.count()
T = TypeVar("T")


def timed(work: Callable[[], T]) -> tuple[T, float]:
    """Result of ``work()`` and the seconds it took."""
    started = time.perf_counter()
    result = work()
    return result, time.perf_counter() - started


def rank_errors(exact_sorted: np.ndarray, estimates: Sequence[float]) -> tuple[float, ...]:
    """|CDF(estimate) − q| for each quantile, counting a tied value as matching any rank it covers."""
    n = exact_sorted.size
    errors = []
    for estimate, q in zip(estimates, QUANTILES, strict=True):
        below = np.searchsorted(exact_sorted, estimate, side="left") / n
        at_or_below = np.searchsorted(exact_sorted, estimate, side="right") / n
        errors.append(max(0.0, below - q, q - at_or_below))
    return tuple(errors)


@dataclass(frozen=True)
class Figures:
    """What one run measured for one implementation."""

    build_s: float
    merge_s: float
    centroids: float
    centroids_per_input: float
    errors: tuple[float, ...]
    merged_errors: tuple[float, ...]


def run_ours(values: np.ndarray, chunks: int) -> Figures:
    """One run of tally.sketches: build on all values, merge ``chunks`` digests of their slices."""
    exact = np.sort(values)
    whole, build_s = timed(lambda: digest_from_values(values))
    parts = [digest_from_values(part) for part in np.array_split(values, chunks)]
    merged, merge_s = timed(lambda: merge_digests(parts))
    assert merged is not None
    return Figures(
        build_s=build_s,
        merge_s=merge_s,
        centroids=_centroids(whole),
        centroids_per_input=statistics.mean(_centroids(p) for p in parts),
        errors=rank_errors(exact, digest_quantiles(whole, QUANTILES)),
        merged_errors=rank_errors(exact, digest_quantiles(merged, QUANTILES)),
    )


def run_package(values: np.ndarray, chunks: int, delta: float) -> Figures:
    """One run of the ``tdigest`` package, the same steps as :func:`run_ours`."""
    exact = np.sort(values)

    def build(part: np.ndarray) -> TDigest:
        digest = TDigest(delta=delta)
        digest.batch_update(part.tolist())
        return digest

    whole, build_s = timed(lambda: build(values))
    parts = [build(part) for part in np.array_split(values, chunks)]
    merged, merge_s = timed(lambda: functools.reduce(operator.add, parts))
    return Figures(
        build_s=build_s,
        merge_s=merge_s,
        centroids=len(whole),
        centroids_per_input=statistics.mean(len(p) for p in parts),
        errors=rank_errors(exact, [whole.percentile(q * 100) for q in QUANTILES]),
        merged_errors=rank_errors(exact, [merged.percentile(q * 100) for q in QUANTILES]),
    )


def median_figures(runs: list[Figures]) -> Figures:
    """Median of each figure over the runs (per quantile for the rank errors)."""
    return Figures(
        build_s=statistics.median(r.build_s for r in runs),
        merge_s=statistics.median(r.merge_s for r in runs),
        centroids=statistics.median(r.centroids for r in runs),
        centroids_per_input=statistics.median(r.centroids_per_input for r in runs),
        errors=tuple(statistics.median(e) for e in zip(*(r.errors for r in runs), strict=True)),
        merged_errors=tuple(statistics.median(e) for e in zip(*(r.merged_errors for r in runs), strict=True)),
    )


def _centroids(digest: bytes) -> int:
    """Centroids in a serialized digest (40-byte header, then 17 bytes per centroid: see tally/sketches.py)."""
    return (len(digest) - 40) // 17


def percents(errors: Sequence[float]) -> str:
    """Rank errors as "0.010% / 0.020% / 0.003%"."""
    return " / ".join(f"{e * 100:.3f}%" for e in errors)


def duration(seconds: float) -> str:
    """Seconds as a short human figure."""
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} µs"


def measure(
    quick: bool = False,
    *,
    values: int | None = None,
    package_values: int | None = None,
    chunks: int = 100,
    seed: int = 7,
) -> list[Figure]:
    """One run on fresh lognormal page-load times: build, merge and rank error, both implementations."""
    values = values or (200_000 if quick else 1_000_000)
    package_values = min(package_values or (10_000 if quick else 50_000), values)
    delta = 1 / COMPRESSION  # the package's delta is 1/compression
    run = next(_RUNS)  # each run its own sample, reproducibly
    rng = np.random.default_rng(seed + run)
    random.seed(seed + run)  # the package picks centroids at random
    page_load_ms = rng.lognormal(np.log(1200), 0.8, values)
    ours = run_ours(page_load_ms, chunks)
    package = run_package(page_load_ms[:package_values], chunks, delta)
    same = run_ours(page_load_ms[:package_values], chunks)
    ours_ns, package_ns = ours.build_s / values * 1e9, package.build_s / package_values * 1e9
    mine, theirs = f"tally.sketches ({values:,} values)", f"tdigest {version('tdigest')} ({package_values:,} values)"
    return [
        Figure(f"{mine}: build, per value", ours_ns, "ns"),
        Figure(f"{theirs}: build, per value", package_ns, "ns", baseline=f"{mine}: build, per value"),
        Figure(f"{mine}: merge {chunks} digests", ours.merge_s * 1e3, "ms"),
        Figure(
            f"{theirs}: merge {chunks} digests", package.merge_s * 1e3, "ms", baseline=f"{mine}: merge {chunks} digests"
        ),
        Figure(f"{mine}: worst rank error of p50/p90/p99", max(ours.errors) * 100, "%", goal="≤ 0.5% (tests)"),
        Figure(f"{mine}: the same after merging {chunks} digests", max(ours.merged_errors) * 100, "%"),
        Figure(
            f"tally.sketches on the package's {package_values:,} values: worst rank error", max(same.errors) * 100, "%"
        ),
        Figure(f"{theirs}: worst rank error of p50/p90/p99", max(package.errors) * 100, "%"),
        Figure(f"{theirs}: the same after merging {chunks} digests", max(package.merged_errors) * 100, "%"),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sketches", description=__doc__)
    parser.add_argument("--values", type=int, default=1_000_000, help="values per digest for tally.sketches")
    parser.add_argument("--package-values", type=int, default=50_000, help="values for the pure-Python package")
    parser.add_argument("--chunks", type=int, default=100, help="digests merged in the merge step")
    parser.add_argument("--repeats", type=int, default=3, help="runs; medians are printed")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    delta = 1 / COMPRESSION  # the package's delta is 1/compression
    ours_runs: list[Figures] = []
    same_sample_runs: list[Figures] = []
    package_runs: list[Figures] = []
    for run in range(args.repeats):
        rng = np.random.default_rng(args.seed + run)
        random.seed(args.seed + run)  # the package picks centroids at random
        page_load_ms = rng.lognormal(np.log(1200), 0.8, args.values)
        ours_runs.append(run_ours(page_load_ms, args.chunks))
        package_runs.append(run_package(page_load_ms[: args.package_values], args.chunks, delta))
        same_sample_runs.append(run_ours(page_load_ms[: args.package_values], args.chunks))
        print(f"run {run + 1}/{args.repeats} done", flush=True)
    ours, package = median_figures(ours_runs), median_figures(package_runs)
    same_sample = median_figures(same_sample_runs)
    n_ours, n_package = args.values, min(args.package_values, args.values)
    per_value_ours, per_value_package = ours.build_s / n_ours, package.build_s / n_package
    rows = [
        ("values per digest", f"{n_ours:,}", f"{n_package:,}"),
        ("build", duration(ours.build_s), duration(package.build_s)),
        ("  per value", f"{per_value_ours * 1e9:,.0f} ns", f"{per_value_package * 1e9:,.0f} ns"),
        (f"  for {n_ours:,} values", duration(ours.build_s), f"{duration(per_value_package * n_ours)} (extrapolated)"),
        (f"merge {args.chunks} digests", duration(ours.merge_s), duration(package.merge_s)),
        ("  centroids per input", f"{ours.centroids_per_input:.0f}", f"{package.centroids_per_input:.0f}"),
        ("centroids in the digest", f"{ours.centroids:.0f}", f"{package.centroids:.0f}"),
        ("p50 / p90 / p99 rank error", percents(ours.errors), percents(package.errors)),
        ("  after the merge", percents(ours.merged_errors), percents(package.merged_errors)),
        (f"  on the same {n_package:,} values", percents(same_sample.errors), percents(package.errors)),
        ("  after the merge", percents(same_sample.merged_errors), percents(package.merged_errors)),
    ]
    print(
        f"\nt-digest on lognormal page-load times, median of {args.repeats} runs, "
        f"compression {COMPRESSION:.0f} on both sides (package delta = 1/{COMPRESSION:.0f})"
    )
    print(f"{'':28} {'tally.sketches':>30} {'tdigest ' + version('tdigest'):>34}")
    for label, mine, theirs in rows:
        print(f"{label:28} {mine:>30} {theirs:>34}")
    print(
        f"tally.sketches builds {per_value_package / per_value_ours:,.0f}x faster per value and merges "
        f"{package.merge_s / ours.merge_s:,.0f}x faster. The package is pure Python, so it ran on the first "
        f"{n_package:,} values only and its {n_ours:,}-value build time is extrapolated per value; "
        f"each side merges {args.chunks} digests of slices of its own values."
    )


if __name__ == "__main__":
    main()
