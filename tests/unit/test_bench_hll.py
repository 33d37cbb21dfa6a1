"""bench.hll counts how often the exact count is inside the dashboard's 2-sigma bounds."""

from __future__ import annotations

import datasketches
import pytest

from bench.hll import Sample, one_seed, share_inside, spark_sketch
from tally.sketches import HLL_LG_K, Estimate, sketch_from_ids, union_estimate


def test_the_share_counts_exact_counts_inside_the_bounds_edges_included() -> None:
    samples = [
        Sample(Estimate(100, 95, 105), 100),
        Sample(Estimate(100, 95, 105), 105),  # on the edge: inside
        Sample(Estimate(100, 95, 105), 106),
        Sample(Estimate(100, 95, 105), 90),
    ]
    assert share_inside(samples) == 50
    assert Sample(Estimate(103, 98, 108), 100).error == pytest.approx(0.03)


def test_the_benchmarks_sketch_is_the_one_spark_writes_and_reads_as_the_kernels() -> None:
    ids = [f"{i:032x}" for i in range(20_000)]
    sketch = datasketches.hll_sketch.deserialize(spark_sketch(ids))
    assert sketch.lg_config_k == HLL_LG_K
    assert sketch.tgt_type == datasketches.tgt_hll_type.HLL_8  # Spark's hll_sketch_agg registers
    # Register width changes nothing the dashboard reads.
    assert union_estimate([spark_sketch(ids)]) == union_estimate([sketch_from_ids(ids)])


def test_a_seeds_union_counts_every_days_visitors_and_each_seed_differs() -> None:
    union, days = one_seed(100_000, 3, seed=0)
    assert len(days) == 3
    assert union.exact == sum(d.exact for d in days)
    other, _ = one_seed(100_000, 3, seed=1)
    assert other.exact != union.exact or other.estimate != union.estimate
