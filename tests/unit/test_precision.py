"""bench.precision measures lg_k 12 and 14 on identical inputs, and docs/BENCHMARKS.md shows them side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.__main__ import BY_NAME
from bench.markdown import render
from bench.precision import error_figures, kpi_reads, main, one_seed, p95, variant
from bench.report import Figure, Record, load_records, save_records
from tally.sketches import Estimate


def test_both_lg_k_estimate_the_same_ids_and_each_prints_its_own_bound() -> None:
    samples = one_seed(100_000, seed=0)
    assert set(samples) == {12, 14}
    (single_12, union_12), (single_14, union_14) = samples[12], samples[14]
    assert single_12.exact == single_14.exact == 100_000
    assert union_12.exact == union_14.exact == 100_000, "30 days of disjoint ids add up to the size"
    assert single_12.estimate.relative_error == pytest.approx(0.032, abs=0.001)
    assert single_14.estimate.relative_error == pytest.approx(0.016, abs=0.001)
    assert union_14.estimate != single_14.estimate, "the union's days are other ids than the single sketch's"


def test_another_seed_draws_other_ids() -> None:
    assert one_seed(1_000, seed=1)[12] != one_seed(1_000, seed=2)[12]


def test_the_p95_is_the_value_at_rank_95_percent_as_the_dashboard_benchmark_takes_it() -> None:
    assert p95([float(v) for v in range(1, 21)]) == 19
    assert p95([5.0]) == 5


def test_error_figures_name_each_lg_k_so_the_document_pairs_them() -> None:
    def sample(value: float) -> Any:
        from bench.hll import Sample

        return Sample(Estimate(value, value * 0.968, value * 1.032), 100)

    figures = error_figures({12: [sample(101), sample(99), sample(104)]}, "one sketch of 100 ids", 3)
    by_name = {f.name: f for f in figures}
    error = by_name["one sketch of 100 ids: abs. error p95 (lg_k 12)"]
    assert error.value == pytest.approx(4.0)
    assert error.note.endswith("2 of 3 inside their bounds")
    assert by_name["one sketch of 100 ids: the bound shown, ± (lg_k 12)"].value == pytest.approx(3.2)


def test_kpi_reads_take_turns_and_leave_each_readers_first_read_out() -> None:
    calls: list[int] = []
    times = kpi_reads({12: lambda: calls.append(12), 14: lambda: calls.append(14)}, reads=3)
    assert calls == [12, 14] * 4
    assert [len(t) for t in times.values()] == [3, 3]


def record(name: str, runs: list[list[Figure]], variants: tuple[str, ...] = ()) -> Record:
    return Record(
        name=name,
        title=f"{name} title",
        command=f".venv/bin/python -m bench.{name}",
        note="",
        quick=False,
        started="2026-11-26 12:00 UTC",
        seconds=60.0,
        load_before=(1.0, 1.0, 1.0),
        load_after=(2.0, 2.0, 2.0),
        machine={"CPU": "test"},
        runs=runs,
        variants=variants,
    )


def backfill_run(seconds_12: float, seconds_14: float) -> list[Figure]:
    first = f"backfill ({variant(12)})"
    return [
        Figure(first, seconds_12, "s"),
        Figure(f"backfill ({variant(14)})", seconds_14, "s", baseline=first, note="1M events"),
        Figure("something measured once", 7.0, "ms"),
    ]


def test_the_document_puts_the_two_lg_k_in_columns_with_their_ratio_and_keeps_other_sections() -> None:
    variants = BY_NAME["precision"].variants
    assert variants == ("lg_k 12", "lg_k 14")
    other = record("sketches", [[Figure("merge", 2.0, "ms"), Figure("package merge", 8.0, "ms", baseline="merge")]])
    precision = record("precision", [backfill_run(100, 110), backfill_run(120, 150)], variants)
    text = render({"sketches": other, "precision": precision}, ["sketches", "precision"])
    assert "| figure | lg_k 12: median (min – max) | lg_k 14: median (min – max) | lg_k 14 / lg_k 12 |" in text
    assert "| backfill | 110 (100 – 120) | 130 (110 – 150) | 1.18× (1.10 – 1.25) | s | 2 |  | 1M events |" in text
    assert "| something measured once | 7.00 | 7.00 | ms | 2 |" in text
    assert "## sketches title" in text and "| merge | 2.00 |" in text
    # The top side-by-side table keeps the other benchmarks' ratios; the pair's ratios are in its own section.
    top = text.split("## sketches title")[0]
    assert "package merge" in top and "backfill" not in top


def test_the_variants_survive_the_kept_runs(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    save_records({"precision": record("precision", [backfill_run(1, 2)], ("lg_k 12", "lg_k 14"))}, path)
    assert load_records(path)["precision"].variants == ("lg_k 12", "lg_k 14")


def test_the_benchmark_explains_itself(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    help_text = capsys.readouterr().out
    assert "--quick" in help_text and "--seeds" in help_text and "--backfill-worker" not in help_text
