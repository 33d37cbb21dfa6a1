"""HLL accuracy benchmark: how often the dashboard's ± (the 2-sigma bound) holds, over many seeds.

For each size (synthetic events over ``DAYS`` days, made as bench.backfill makes them, by
simulator.synthetic) and each of ``SEEDS`` seeds: one sketch per day of the day's distinct non-bot
visitor ids, as Spark's ``hll_sketch_agg`` writes it (DataSketches HLL, lg_k from tally.sketches,
HLL_8 registers, updatable form), read the way the dashboard reads them
(``tally.sketches.union_estimate``: each day alone, and the union over all days). The exact
counts come from the ids themselves. Within a seed every day has its own generator seed, and
visitor ids are new every day (they rotate daily), so the union counts visitor-days.

At about 95% of estimates inside their 2-sigma bounds the ± the dashboard shows is honest;
one estimate outside in twenty is what it promises, not a fault.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import datasketches
import numpy as np
import pyarrow.compute as pc

from bench.report import Figure, print_figures
from simulator.synthetic import synthetic_events
from tally.sketches import HLL_LG_K, Estimate, union_estimate

EVENTS_PER_VISIT = 4.4  # what simulator.synthetic produces on average
DAYS = 10
SEEDS = 20
SIZES = (100_000, 300_000, 1_000_000)  # events over DAYS days, per seed
START = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
# Spark's hll_sketch_agg keeps HLL_8 registers (its TgtHllType); the estimate is the same in any
# register width, but the benchmark builds exactly what the views store.
SPARK_HLL_TYPE = datasketches.tgt_hll_type.HLL_8


def day_ids(events: int, days: int, seed: int, day: int) -> np.ndarray:
    """The distinct non-bot visitor ids of one synthetic day (``events`` over ``days`` days in all)."""
    per_day = int(events / EVENTS_PER_VISIT / days)
    table = synthetic_events(
        visits=per_day,
        start=START + dt.timedelta(days=day),
        span=dt.timedelta(days=1),
        seed=seed * 1000 + day,
        visitors=per_day // 3,  # as bench.backfill: about three visits per visitor
    )
    humans = table.filter(pc.invert(table["is_bot"]))
    return np.asarray(pc.unique(humans["visitor_id"]).to_numpy(zero_copy_only=False))


def spark_sketch(ids: Sequence[str] | np.ndarray, *, lg_k: int = HLL_LG_K) -> bytes:
    """A sketch of ``ids`` as Spark's ``hll_sketch_agg(visitor_id, lg_k)`` stores it."""
    sketch = datasketches.hll_sketch(lg_k, SPARK_HLL_TYPE)
    update = sketch.update
    for visitor_id in ids:
        update(str(visitor_id))
    return bytes(sketch.serialize_updatable())


def inside(estimate: Estimate, exact: int) -> bool:
    """Whether the exact count lies within the estimate's 2-sigma bounds (the dashboard's ±)."""
    return estimate.lower <= exact <= estimate.upper


@dataclass(frozen=True)
class Sample:
    """One estimate against its exact count."""

    estimate: Estimate
    exact: int

    @property
    def error(self) -> float:
        """Signed relative error, estimate / exact - 1."""
        return self.estimate.value / self.exact - 1 if self.exact else 0.0


def share_inside(samples: Sequence[Sample]) -> float:
    """Percent of ``samples`` whose exact count is inside the 2-sigma bounds."""
    assert samples, "no samples"
    return 100 * sum(inside(s.estimate, s.exact) for s in samples) / len(samples)


def one_seed(events: int, days: int, seed: int) -> tuple[Sample, list[Sample]]:
    """The union over ``days`` days and each day alone, for one seed."""
    ids = [day_ids(events, days, seed, day) for day in range(days)]
    sketches = [spark_sketch(day) for day in ids]
    per_day = [Sample(union_estimate([s]), len(day)) for s, day in zip(sketches, ids, strict=True)]
    union = Sample(union_estimate(sketches), sum(len(day) for day in ids))  # ids rotate daily: days are disjoint
    return union, per_day


def figures_for(label: str, unions: Sequence[Sample], days: Sequence[Sample]) -> list[Figure]:
    """What one size's samples say: the share inside 2 sigma, and the error against the stated sigma."""
    errors = sorted(abs(s.error) * 100 for s in unions)
    sigma = statistics.median(s.estimate.relative_error / 2 * 100 for s in unions)
    exact = statistics.median(s.exact for s in unions)
    n_in = sum(inside(s.estimate, s.exact) for s in unions)
    return [
        Figure(
            f"{label}: union over the days inside the 2-sigma bound",
            share_inside(unions),
            "%",
            goal="≈ 95%",
            note=f"{n_in} of {len(unions)} seeds; ≈ {exact:,.0f} distinct visitors each",
        ),
        Figure(
            f"{label}: single days inside the 2-sigma bound",
            share_inside(days),
            "%",
            goal="≈ 95%",
            note=f"{len(days)} days; ≈ {statistics.median(s.exact for s in days):,.0f} distinct each",
        ),
        Figure(f"{label}: union error, median", errors[len(errors) // 2], "%"),
        Figure(f"{label}: union error, max", errors[-1], "%"),
        Figure(
            f"{label}: union error, standard deviation",
            statistics.pstdev(s.error * 100 for s in unions),
            "%",
            note=f"the dashboard's 1 sigma: {sigma:.2f}% (lg_k {HLL_LG_K})",
        ),
    ]


def measure(quick: bool = False, *, sizes: Sequence[int] | None = None, seeds: int | None = None) -> list[Figure]:
    """One run: every size over ``seeds`` seeds."""
    sizes = sizes or ((100_000,) if quick else SIZES)
    seeds = seeds or (3 if quick else SEEDS)
    figures: list[Figure] = []
    for events in sizes:
        unions, days = [], []
        for seed in range(seeds):
            union, per_day = one_seed(events, DAYS, seed)
            unions.append(union)
            days += per_day
        label = f"{events / 1e6:g}M events over {DAYS} days"
        print(f"  {label}: {seeds} seeds done", flush=True)
        figures += figures_for(label, unions, days)
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.hll", description=__doc__)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="events over the days, comma-separated")
    parser.add_argument("--seeds", type=int, default=SEEDS, help="seeds per size (at least 20 for a share)")
    parser.add_argument("--quick", action="store_true", help="one small size, 3 seeds (a smoke test)")
    args = parser.parse_args(argv)
    sizes = None if args.quick else [int(s) for s in args.sizes.split(",")]
    print_figures(measure(args.quick, sizes=sizes, seeds=None if args.quick else args.seeds))


if __name__ == "__main__":
    main()
