"""Render the kept benchmark runs (``bench/results.json``) as ``docs/BENCHMARKS.md``."""

from __future__ import annotations

from collections.abc import Iterable

from bench.report import Record, Row, summarise
from tally.settings import PROJECT_ROOT

DOCUMENT = PROJECT_ROOT / "docs" / "BENCHMARKS.md"


def number(value: float) -> str:
    """A figure for the table: thousands separated, about three significant digits."""
    size = abs(value)
    if size >= 100:
        return f"{value:,.0f}"
    if size >= 10:
        return f"{value:.1f}"
    if size >= 0.01 or size == 0:
        return f"{value:.2f}"
    return f"{value:.2g}"


def spread(low: float, high: float) -> str:
    return number(low) if low == high else f"{number(low)} – {number(high)}"


def _load(load: tuple[float, float, float]) -> str:
    return f"{load[0]:.1f}"


def _section(record: Record) -> list[str]:
    mode = "**quick run** (short durations: a smoke test, not a result)" if record.quick else "full run"
    lines = [
        f"## {record.title}",
        "",
        f"Reproduce one run: `{record.command}`. {mode}; {len(record.runs)} run(s), started {record.started},"
        f" {record.seconds / 60:.1f} min in all; 1-minute load average {_load(record.load_before)} before,"
        f" {_load(record.load_after)} after (2 cores, shared).",
    ]
    if record.note:
        lines += ["", record.note]
    rows = summarise(record.runs)
    paired, alone = _by_variant(rows, record.variants)
    if paired:
        lines += ["", *_variant_table(paired, record.variants)]
    if alone:
        lines += [
            "",
            "| figure | median | spread (min – max) | unit | runs | goal | note |",
            "|---|---:|---:|---|---:|---|---|",
        ]
    for row in alone:
        lines.append(
            f"| {row.name} | {number(row.median)} | {spread(row.low, row.high)} | {row.unit} | {row.runs}"
            f" | {row.goal} | {row.note} |"
        )
    return [*lines, ""]


def _by_variant(rows: list[Row], variants: tuple[str, ...]) -> tuple[dict[str, dict[str, Row]], list[Row]]:
    """Rows named "<what> (<variant>)" grouped by what they measure (in first-seen order), and the rest."""
    paired: dict[str, dict[str, Row]] = {}
    alone = []
    for row in rows:
        found = next((v for v in variants if row.name.endswith(f" ({v})")), None)
        if found is None:
            alone.append(row)
        else:
            paired.setdefault(row.name[: -len(f" ({found})")], {})[found] = row
    return paired, alone


def _variant_table(paired: dict[str, dict[str, Row]], variants: tuple[str, ...]) -> list[str]:
    """One row per measured thing, a column per variant (median, then the spread), and last / first."""
    ratio_head = f"{variants[-1]} / {variants[0]}"
    lines = [
        "| figure | " + " | ".join(f"{v}: median (min – max)" for v in variants) + f" | {ratio_head} | unit | runs"
        " | goal | note |",
        "|---|" + "---:|" * (len(variants) + 1) + "---|---:|---|---|",
    ]
    for what, by_variant in paired.items():
        rows = [by_variant.get(v) for v in variants]
        cells = [f"{number(r.median)} ({spread(r.low, r.high)})" if r else "" for r in rows]
        last = rows[-1]
        ratio = f"{number(last.ratio[1])}× ({spread(last.ratio[2], last.ratio[3])})" if last and last.ratio else ""
        present = [r for r in rows if r]
        notes = list(dict.fromkeys(r.note for r in present if r.note))
        if len(notes) > 1:
            notes = [f"{v}: {r.note}" for v, r in zip(variants, rows, strict=True) if r and r.note]
        goal = next((r.goal for r in present if r.goal), "")
        lines.append(
            f"| {what} | {' | '.join(cells)} | {ratio} | {present[0].unit} | {max(r.runs for r in present)}"
            f" | {goal} | {'; '.join(notes)} |"
        )
    return lines


def _ratios(records: Iterable[Record]) -> list[str]:
    # A benchmark of variants shows its own ratios in its section's last-over-first column.
    rows: list[tuple[Record, Row]] = [
        (r, row) for r in records if not r.variants for row in summarise(r.runs) if row.ratio
    ]
    if not rows:
        return []
    lines = [
        "## Side by side",
        "",
        "Each ratio is `figure / baseline`, taken run by run in the same run, then summarised.",
        "",
        "| benchmark | figure | / baseline | ratio (median) | spread | goal |",
        "|---|---|---|---:|---:|---|",
    ]
    for record, row in rows:
        assert row.ratio is not None
        baseline, median, low, high = row.ratio
        lines.append(
            f"| {record.name} | {row.name} | {baseline} | {number(median)}× | {spread(low, high)} | {row.goal} |"
        )
    return [*lines, ""]


def render(records: dict[str, Record], order: list[str]) -> str:
    """The whole document: machine, side-by-side ratios, then one section per benchmark."""
    ordered = [records[name] for name in order if name in records]
    ordered += [r for name, r in records.items() if name not in order]
    newest = max(ordered, key=lambda r: r.started) if ordered else None
    lines = [
        "# Benchmarks",
        "",
        "Written by `make bench` (`.venv/bin/python -m bench`; `--only NAME` re-runs one benchmark,"
        " `--quick` shortens every run) from the runs kept in `bench/results.json`. Do not edit by hand.",
        "Every figure is the median over its runs with the spread (min – max); each benchmark starts"
        " its own stack on free ports. Each figure states the goal it is held to.",
        "",
    ]
    if any(r.quick for r in ordered):
        quick = ", ".join(f"`{r.name}`" for r in ordered if r.quick)
        lines += [f"> Quick runs ({quick}): short durations, so those figures are indicative only.", ""]
    if newest is not None:
        lines += ["## Machine", "", "| | |", "|---|---|"]
        lines += [f"| {key} | {value} |" for key, value in newest.machine.items()]
        lines += [""]
    lines += _ratios(ordered)
    for record in ordered:
        lines += _section(record)
    return "\n".join(lines)


def write(records: dict[str, Record], order: list[str]) -> None:
    DOCUMENT.parent.mkdir(parents=True, exist_ok=True)
    DOCUMENT.write_text(render(records, order))
