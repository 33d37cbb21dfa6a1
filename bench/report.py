"""The benchmark harness: figures, repeated runs, and the table in ``docs/BENCHMARKS.md``.

Interface of a benchmark module ``bench/<name>.py`` (follow it to add one, e.g. ``bench/dashboard.py``):

- ``measure(quick: bool) -> list[Figure]``: one run on a private stack it starts and stops itself,
  returning its figures; ``quick`` shortens it (a smoke test of the harness, not a result). A run
  that needs a home of its own (a broker, warehouses, logs) is decorated with
  :func:`bench.homes.in_temporary_home`, which passes it one and removes it when the run ends;
- ``main(argv)``: the same run from the command line, printing its figures (``python -m bench.<name>``);
- one :class:`Benchmark` entry in ``bench/__main__.py``'s ``BENCHMARKS``: its name (for ``--only``),
  title, how many runs (``runs``, ``quick_runs``) and the command that reproduces one run.

A :class:`Figure` is one number with its unit. Name figures the same in every run: the table
shows, per name, the median over the runs and the spread (min-max). A figure with a ``baseline``
(the name of another figure of the same benchmark) also gets the ratio ``value / baseline``,
computed run by run and then summarised the same way: that is how side-by-side comparisons
(ingest vs a bare endpoint, Tally's t-digest vs the ``tdigest`` package, HLL vs exact
``COUNT(DISTINCT)``) are reported. Each run of every benchmark is kept in ``bench/results.json``,
so ``--only NAME`` re-runs one benchmark and the file is rendered again with the others kept.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import platform
import re
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import psutil

from tally.jvm import JARS_DIR, java_binary
from tally.settings import PROJECT_ROOT

log = logging.getLogger("tally.bench")

RESULTS = PROJECT_ROOT / "bench" / "results.json"


@dataclass(frozen=True)
class Figure:
    """One measured number: ``name`` (the same in every run), ``value`` in ``unit``."""

    name: str
    value: float
    unit: str
    baseline: str | None = None  # another figure's name: the table adds the ratio value / baseline
    goal: str = ""  # the budget it is held to, as text
    note: str = ""


@dataclass(frozen=True)
class Benchmark:
    """A benchmark as the harness runs it."""

    name: str
    title: str
    measure: Callable[[bool], list[Figure]]
    command: str  # reproduces one run, e.g. ".venv/bin/python -m bench.ingest"
    runs: int = 3
    quick_runs: int = 1
    note: str = ""  # said under the section's title (what the runs do, why they are few)
    # Figures named "<what> (<variant>)" for each of these are shown as one row with a column per
    # variant (e.g. "lg_k 12", "lg_k 14"): two configurations measured side by side in the same run.
    variants: tuple[str, ...] = ()


@dataclass
class Record:
    """Every run of one benchmark, and the conditions they ran under."""

    name: str
    title: str
    command: str
    note: str
    quick: bool
    started: str
    seconds: float
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    machine: dict[str, str]
    runs: list[list[Figure]] = field(default_factory=list)
    variants: tuple[str, ...] = ()


def print_figures(figures: list[Figure]) -> None:
    """A benchmark's figures, one a line, for its ``main``."""
    width = max((len(f.name) for f in figures), default=0)
    for f in figures:
        goal = f" (goal {f.goal})" if f.goal else ""
        note = f"; {f.note}" if f.note else ""
        print(f"  {f.name:<{width}}  {f.value:>12,.2f} {f.unit}{goal}{note}", flush=True)


def run_benchmark(benchmark: Benchmark, *, quick: bool, runs: int | None = None) -> Record:
    """Run a benchmark ``runs`` times (default: its own count for the mode) and keep every figure."""
    count = runs or (benchmark.quick_runs if quick else benchmark.runs)
    record = Record(
        name=benchmark.name,
        title=benchmark.title,
        command=benchmark.command + (" --quick" if quick else ""),
        note=benchmark.note,
        quick=quick,
        started=dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        seconds=0.0,
        load_before=os.getloadavg(),
        load_after=(0.0, 0.0, 0.0),
        machine=machine(),
        variants=benchmark.variants,
    )
    began = time.monotonic()
    for i in range(count):
        log.info(f"{benchmark.name}: run {i + 1} of {count}")
        saved = dict(os.environ)  # benchmarks point TALLY_* at their private stacks
        try:
            record.runs.append(benchmark.measure(quick))
        finally:
            os.environ.clear()
            os.environ.update(saved)
    record.seconds = time.monotonic() - began
    record.load_after = os.getloadavg()
    return record


@dataclass(frozen=True)
class Row:
    """One figure summarised over the runs."""

    name: str
    unit: str
    median: float
    low: float
    high: float
    runs: int
    goal: str
    note: str
    ratio: tuple[str, float, float, float] | None  # baseline name, median, low, high


def summarise(runs: list[list[Figure]]) -> list[Row]:
    """Median and min-max of each figure over the runs (in first-seen order), ratios run by run."""
    names: dict[str, Figure] = {}
    for figures in runs:
        for f in figures:
            names.setdefault(f.name, f)
    rows = []
    for name, first in names.items():
        values = [f.value for figures in runs for f in figures if f.name == name]
        ratio = None
        if first.baseline:
            ratios = [
                f.value / b.value
                for figures in runs
                for f in figures
                for b in figures
                if f.name == name and b.name == first.baseline and b.value
            ]
            if ratios:
                ratio = (first.baseline, statistics.median(ratios), min(ratios), max(ratios))
        rows.append(
            Row(
                name,
                first.unit,
                statistics.median(values),
                min(values),
                max(values),
                len(values),
                first.goal,
                first.note,
                ratio,
            )
        )
    return rows


def _command_output(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return "not found"
    return (done.stdout + done.stderr).strip()


def _package(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def machine() -> dict[str, str]:
    """What the figures were measured on."""
    cpu = "unknown"
    with open("/proc/cpuinfo") if Path("/proc/cpuinfo").exists() else open(os.devnull) as info:
        for line in info:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    java = _command_output([java_binary(), "-version"]).splitlines()
    kafka = sorted(JARS_DIR.glob("kafka-broker/kafka_2.*.jar"))
    kafka_version = re.sub(r"^kafka_[\d.]+-|\.jar$", "", kafka[0].name) if kafka else "not set up (tally setup)"
    return {
        "CPU": f"{cpu}, {os.cpu_count()} logical cores (shared with other work: see the load averages)",
        "RAM": f"{psutil.virtual_memory().total / 2**30:.1f} GiB",
        "OS": f"{platform.system()} {platform.release()} ({platform.machine()})",
        "Python": platform.python_version(),
        "Java": java[0] if java else "not found",
        "Spark": f"pyspark {_package('pyspark')}, delta-spark {_package('delta-spark')}",
        "Kafka": f"broker {kafka_version} (KRaft, one node), confluent-kafka {_package('confluent-kafka')}",
        "Delta (no JVM)": f"deltalake {_package('deltalake')}",
        "HTTP": f"uvicorn {_package('uvicorn')}, starlette {_package('starlette')}",
    }


def load_records(path: Path = RESULTS) -> dict[str, Record]:
    """Runs kept from earlier invocations, by benchmark name."""
    if not path.exists():
        return {}
    out = {}
    for name, data in json.loads(path.read_text()).items():
        data["runs"] = [[Figure(**f) for f in figures] for figures in data["runs"]]
        data["load_before"], data["load_after"] = tuple(data["load_before"]), tuple(data["load_after"])
        data["variants"] = tuple(data.get("variants", ()))
        out[name] = Record(**data)
    return out


def save_records(records: dict[str, Record], path: Path = RESULTS) -> None:
    path.write_text(json.dumps({name: asdict(r) for name, r in records.items()}, indent=1) + "\n")
