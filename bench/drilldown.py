"""Drill-down benchmark: a filtered dashboard page's first question after the archiver committed
new events, over 90 days of bench.dashboard's data set, when the range's prepared scan is extended
by the files the commits added (``query.scans``), side by side in the same run with reading the
range again, what every new table version cost before.

The archiver commits every 2 s or so; between two questions here come 5 commits of 1,000 events
(10 s at the soak's 500 events/s): copies of the data set's last-day events, moved a minute on,
with new ids, so that most belong to visitors already in the range and sessionising them again
is real work. They go to a copy of the data set's raw.pageviews (the kept data set is left as it
is). Every other pair of rounds ends with a compaction of the last day's files, as the archiver's
every 100 commits (``archiver/tables.py``): the scan then follows the table's log. Each run asks the
same question both ways, taking turns at going first, and checks that the two answers are equal.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake

from bench import dashboard
from bench.report import Figure, print_figures
from query import scan_cache
from query.exact import ExactQuery
from query.plausible import parse_query
from query.sources import session_gap_ms
from tally.log import setup_logging
from tally.tables import RAW_PAGEVIEWS

COMMITS = 5  # between two questions
COMMIT_EVENTS = 1_000


def _commit(table: Path, sample: pa.Table, run: int, part: int) -> None:
    """One archiver-sized commit: the sample's events a minute later per commit, with new ids."""
    shift = 60_000 * (run * COMMITS + part + 1)
    ids = pc.binary_join_element_wise(sample["event_id"], f"-{run}-{part}", "")
    moved = sample.set_column(sample.schema.get_field_index("event_id"), "event_id", ids)
    at = pc.add(moved["event_time"], shift)
    moved = moved.set_column(moved.schema.get_field_index("event_time"), "event_time", at)
    write_deltalake(str(table), moved, mode="append", partition_by=["event_date"])


def _ask(
    raw: Any, snapshot: tuple[str, int], question: Any, gap_ms: int, kept: scan_cache.PreparedScans
) -> tuple[float, Any]:
    """The question over ``kept``'s scans: seconds taken and the answer's rows, sorted."""
    scan_cache.SCANS = kept
    began = time.perf_counter()
    rows = ExactQuery(raw, dashboard.SITE, gap_ms, snapshot=snapshot).answer(question)
    return time.perf_counter() - began, sorted(rows, key=lambda r: [str(d) for d in r["dimensions"]])


def measure(quick: bool = False, *, events: int | None = None, days: int = 90, runs: int | None = None) -> list[Figure]:
    """``runs`` rounds of commits, each followed by the same filtered question asked both ways."""
    events = events or (300_000 if quick else 1_000_000)
    runs = runs or (4 if quick else 8)
    settings, last = dashboard.dataset(events, days)
    gap_ms = session_gap_ms(settings)
    first = last - dt.timedelta(days=days - 1)
    question = parse_query(
        {
            "site_id": dashboard.SITE,
            "metrics": ["visitors", "pageviews", "visits", "bounce_rate", "visit_duration"],
            "dimensions": ["visit:entry_page"],
            "filters": [["is", "visit:country", ["DE"]]],
            "date_range": [first.isoformat(), last.isoformat()],
        },
        today=last,
    )
    previous = scan_cache.SCANS  # each side is asked over scans of its own
    try:
        with tempfile.TemporaryDirectory(prefix="tally-bench-drilldown-") as tmp:
            table = Path(tmp) / RAW_PAGEVIEWS
            shutil.copytree(settings.table_uri(RAW_PAGEVIEWS), table)
            source = DeltaTable(str(table))
            # moved at most 30 minutes on, events of the day's last hour left out: none changes its date
            end = int(dt.datetime.combine(last, dt.time(23), dt.UTC).timestamp() * 1000)
            inside = (pc.field("event_date") == last) & (pc.field("event_time") < end)
            day = source.to_pyarrow_dataset().to_table(filter=inside)
            sample = day.slice(0, COMMIT_EVENTS)
            extended = scan_cache.PreparedScans()
            first_read, _ = _ask(
                source.to_pyarrow_dataset(), (str(table), source.version()), question, gap_ms, extended
            )
            # each side's times, by whether the round ended with a compaction
            took: dict[bool, dict[str, list[float]]] = {c: {"extended": [], "read": []} for c in (False, True)}
            warm: dict[str, list[float]] = {"extended": [], "read": []}  # asked again over the same version
            for run in range(runs):
                for part in range(COMMITS):
                    _commit(table, sample, run, part)
                compacted = run // 2 % 2 == 1  # rounds 2-3, 6-7, ...: each kind of round asked in both orders
                if compacted:
                    DeltaTable(str(table)).optimize.compact(partition_filters=[("event_date", "=", last.isoformat())])
                opened = DeltaTable(str(table))
                raw, snapshot = opened.to_pyarrow_dataset(), (str(table), opened.version())
                answers = {}
                # the read side has nothing older to extend: the range is read
                kept = {"extended": extended, "read": scan_cache.PreparedScans()}
                order = ("extended", "read") if run % 2 == 0 else ("read", "extended")
                for how in order:
                    seconds, answers[how] = _ask(raw, snapshot, question, gap_ms, kept[how])
                    took[compacted][how].append(seconds * 1000)
                for how in order:
                    warm[how].append(_ask(raw, snapshot, question, gap_ms, kept[how])[0] * 1000)
                if answers["extended"] != answers["read"]:
                    raise AssertionError(f"run {run}: the extended scan's answer differs from a read of the version")
                ext, read = took[compacted]["extended"][-1], took[compacted]["read"][-1]
                kind = " (compacted)" if compacted else ""
                print(f"run {run + 1}/{runs}{kind}: extended {ext:.0f} ms, read {read:.0f} ms")
    finally:
        scan_cache.SCANS = previous
    plain, compacted_rounds = took[False], took[True]
    each = f"{len(plain['read'])} questions each way"
    note = f"{COMMITS} commits of {COMMIT_EVENTS:,} events before each question; {each}"
    return [
        Figure(
            "first filtered question (the range read)", first_read * 1000, "ms", note=f"{events:,} events, {days} days"
        ),
        Figure("question after commits: range read again, p50", statistics.median(plain["read"]), "ms", note=note),
        Figure(
            "question after commits: scan extended, p50",
            statistics.median(plain["extended"]),
            "ms",
            baseline="question after commits: range read again, p50",
            note=note,
        ),
        Figure("question after commits: scan extended, max", max(plain["extended"]), "ms"),
        Figure(
            "question after commits and a compaction: range read again, p50",
            statistics.median(compacted_rounds["read"]),
            "ms",
            note=f"the last day's files compacted after the commits; {len(compacted_rounds['read'])} questions each",
        ),
        Figure(
            "question after commits and a compaction: scan followed, p50",
            statistics.median(compacted_rounds["extended"]),
            "ms",
            baseline="question after commits and a compaction: range read again, p50",
            note="the compaction's files taken from the table's log; the rows added since read from the files"
            " that held them",
        ),
        Figure("the question again: over a read scan, p50", statistics.median(warm["read"]), "ms"),
        Figure(
            "the question again: over an extended scan, p50",
            statistics.median(warm["extended"]),
            "ms",
            baseline="the question again: over a read scan, p50",
            note="an extended scan's tables are views over the read scan's and the events added since",
        ),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.drilldown", description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000, help="events in bench.dashboard's data set")
    parser.add_argument("--runs", type=int, default=8, help="rounds of commits and questions")
    parser.add_argument("--quick", action="store_true", help="300k events, 4 rounds (a smoke test)")
    args = parser.parse_args(argv)
    setup_logging()
    events = None if args.quick else args.events
    print_figures(measure(args.quick, events=events, runs=None if args.quick else args.runs))


if __name__ == "__main__":
    main()
