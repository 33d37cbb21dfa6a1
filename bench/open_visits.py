"""What counting visits as they happen costs a report: reading a site's open visits
(``query.open_visits``) over 90 days of synthetic events ending now, side by side in the same run
with sessionising the whole range the way a question answered from raw events does
(``query.raw_events.visits_sql`` over every event of the 90 days), the cost the open visits stand
beside on the raw path and bound on the views' path.

No view is written, so every visit of the tail counts as open: the most work the open visits can
take for these events. The two take turns, ABAB, each timed ``--runs`` times after one untimed run.

Run: ``.venv/bin/python -m bench.open_visits`` (about a minute on 2 cores). Not yet one of ``python
-m bench``'s benchmarks: its figures are quoted in docs/EVENTS-AND-VISITS-PLAN.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from bench.homes import in_temporary_home
from bench.report import Figure, print_figures

SITE = "demo.tally.local"
DAYS = 90
EVENTS_PER_VISIT = 4.4  # what simulator.synthetic makes on average


def _timed(work: Callable[[], object], runs: int) -> list[float]:
    work()  # warm: the files' footers and DuckDB's first plan
    seconds = []
    for _ in range(runs):
        began = time.perf_counter()
        work()
        seconds.append(time.perf_counter() - began)
    return seconds


@in_temporary_home("open-visits")
def measure(home: Path, quick: bool = False, *, events: int = 1_000_000, runs: int = 7) -> list[Figure]:
    from deltalake import DeltaTable, write_deltalake

    from query.aggregates import Range
    from query.open_visits import Tables, open_visits, tail_of
    from query.raw_events import COLUMNS, open_events, visits_sql
    from simulator.synthetic import synthetic_events
    from tally.settings import load_settings
    from tally.storage import arrow_dataset

    events = events // 10 if quick else events
    uri = str(home / "raw")
    now = dt.datetime.now(dt.UTC)
    first = now - dt.timedelta(days=DAYS)
    for chunk in range(9):  # a few commits, ten days each
        table = synthetic_events(
            visits=int(events / EVENTS_PER_VISIT / 9),
            start=first + dt.timedelta(days=10 * chunk),
            span=dt.timedelta(days=10),
            seed=chunk,
            site_id=SITE,
        )
        write_deltalake(uri, table, mode="append", partition_by=["event_date"])
    raw = arrow_dataset(DeltaTable(uri))
    tail = tail_of(load_settings())
    days = Range(first.date(), now.date())

    def still_open() -> object:
        return open_visits(Tables(raw, None, None), SITE, tail)

    def whole_range() -> object:
        con = open_events(raw, SITE, days, COLUMNS)  # the columns a question from raw events reads
        try:
            con.execute(visits_sql("ev", tail.gap_ms))
            return con.execute("SELECT count(*) FROM visits").fetchone()
        finally:
            con.close()

    timed: dict[str, list[float]] = {"open": [], "range": []}
    for _ in range(2):  # ABAB
        timed["open"] += _timed(still_open, runs)
        timed["range"] += _timed(whole_range, runs)
    found = len(open_visits(Tables(raw, None, None), SITE, tail))
    note = f"{raw.count_rows():,} events over {DAYS} days; {found} visits open"
    return [
        Figure("open visits read: median", statistics.median(timed["open"]) * 1000, "ms", note=note),
        Figure("open visits read: max", max(timed["open"]) * 1000, "ms"),
        Figure("90 days sessionised (the raw path): median", statistics.median(timed["range"]) * 1000, "ms"),
        Figure("90 days sessionised (the raw path): max", max(timed["range"]) * 1000, "ms"),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.open_visits", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the events")
    parser.add_argument("--events", type=int, default=1_000_000, help="synthetic events over the 90 days")
    parser.add_argument("--runs", type=int, default=7, help="timed runs of each, per turn")
    args = parser.parse_args(argv)
    print_figures(measure(args.quick, events=args.events, runs=args.runs))


if __name__ == "__main__":
    main()
