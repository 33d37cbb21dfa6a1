"""Which streaming operator can keep visits as they happen: the cost of one micro-batch, side by
side in the same Spark session, for the candidates of docs/EVENTS-AND-VISITS-PLAN.md §4.

The same events go through each candidate: the simulator's traffic (4.4 events a visit), cut by
event time into files of ``rate × trigger`` events, read one file a micro-batch
(``maxFilesPerTrigger=1``, ``availableNow``), watermarked and grouped by ``(site_id,
visitor_id)``. The candidates:

- **session window** (today's ``sessions`` query: ``session_window`` aggregation in append mode,
  a visit written once it closes): the baseline, since it is what the views job runs now;
- **session window with its events**: the same aggregation carrying each visit's events
  (``collect_list`` of their columns), so that a visit's events can be written with the visit's
  attributes when it closes;
- **transformWithState** (Spark 4's Row API): a Python processor keeps each visitor's open visits
  in one ``ValueState`` and an event-time timer, and emits every event with its visit id and place,
  and every visit that changed (open) or closed;
- **applyInPandasWithState**: the same rule in pandas, with an event-time timeout.

Both stateful candidates run the one rule of :func:`absorb` and :func:`close` (the gap rule over
sorted events), so they differ only in how Spark hands keys and state to Python. The sink is
Spark's ``noop``: what is timed is the operator, not a table write. Time is compressed so that
visits close within a short run: a 2-minute gap and a 1-minute watermark instead of 30 and 10, so
each visit opens, grows and closes as it would, with fewer visits open at once than in production
(state lookups are RocksDB reads either way).

Figures: the median and p95 of a micro-batch's ``triggerExecution`` over the steady batches (the
first few, while the JVM warms up, are left out), and the events a second one core sustains at
that median.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from bench.homes import in_temporary_home
from bench.report import Figure, print_figures
from simulator.synthetic import synthetic_events

GAP_MS = 120_000
WATERMARK = "1 minute"
TRIGGER_S = 5
CORES = 2
WARM_BATCHES = 4
SESSION_WINDOW, WITH_EVENTS = "session window", "session window with its events"
TWS, PANDAS_STATE = "transformWithState", "applyInPandasWithState"
CANDIDATES = (SESSION_WINDOW, WITH_EVENTS, TWS, PANDAS_STATE)
COLUMNS = ("site_id", "visitor_id", "event_id", "event_time", "type", "path", "source", "country")
NOTE = (
    "One run, the candidates in turn in one Spark session (local[2], RocksDB state, 2 shuffle partitions) over"
    " the same files: the simulator's events, one file of rate x 5 s a micro-batch, watermarked and grouped by"
    " (site_id, visitor_id), written to Spark's noop sink. Both stateful candidates run the same Python rule"
    " (bench/visits_operator.py: absorb, close). Time compressed: a 2-minute gap and a 1-minute watermark, so"
    " visits close within the run. The first 4 batches are left out."
)
OUT_DDL = (
    "kind STRING, site_id STRING, visitor_id STRING, event_id STRING, visit_id STRING, seq INT,"
    " start_ms BIGINT, last_ms BIGINT, pageviews INT, entry_page STRING, exit_page STRING,"
    " source STRING, country STRING, is_open BOOLEAN"
)
OUT_NAMES = [part.split()[0] for part in OUT_DDL.split(", ")]


# The rule both stateful candidates run: a visit is a visitor's events with gaps under GAP_MS.
def absorb(
    key: tuple[str, str], visits: list[dict[str, Any]], events: list[tuple[Any, ...]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Add a visitor's new events (event_id, ms, type, path, source, country; any order) to their
    open visits: rows out for each event (its visit and place) and for each visit that changed."""
    out: list[dict[str, Any]] = []
    changed: dict[str, dict[str, Any]] = {}
    for event_id, ms, kind, path, source, country in sorted(events, key=lambda e: (e[1], e[0])):
        visit = next((v for v in visits if v["start_ms"] - GAP_MS < ms < v["last_ms"] + GAP_MS), None)
        if visit is None:
            visit = {"visit_id": event_id, "start_ms": ms, "last_ms": ms, "n": 0, "pageviews": 0}
            visit.update(entry_page=None, exit_page=None, source=source, country=country)
            visits.append(visit)
        visit["n"] += 1
        visit["start_ms"], visit["last_ms"] = min(visit["start_ms"], ms), max(visit["last_ms"], ms)
        if kind == "pageview":
            visit["pageviews"] += 1
            visit["entry_page"] = visit["entry_page"] or path
            visit["exit_page"] = path
        out.append({"kind": "event", "event_id": event_id, "visit_id": visit["visit_id"], "seq": visit["n"]})
        changed[visit["visit_id"]] = visit
    out += [_visit_row(v, is_open=True) for v in changed.values()]
    for row in out:
        row["site_id"], row["visitor_id"] = key
    return visits, out


def close(
    key: tuple[str, str], visits: list[dict[str, Any]], watermark_ms: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The visits the watermark has closed (last event + gap behind it), as final rows."""
    closed = [v for v in visits if v["last_ms"] + GAP_MS <= watermark_ms]
    rows = [{**_visit_row(v, is_open=False), "site_id": key[0], "visitor_id": key[1]} for v in closed]
    return [v for v in visits if v not in closed], rows


def _visit_row(visit: dict[str, Any], *, is_open: bool) -> dict[str, Any]:
    fields = ("visit_id", "start_ms", "last_ms", "pageviews", "entry_page", "exit_page", "source", "country")
    return {"kind": "visit", **{f: visit[f] for f in fields}, "is_open": is_open}


def _timer(visits: list[dict[str, Any]]) -> int | None:
    return min((v["last_ms"] + GAP_MS for v in visits), default=None)


def write_batches(folder: Path, rate: int, batches: int) -> int:
    """The simulator's events at ``rate`` a second of event time, one Parquet file per trigger."""
    folder.mkdir(parents=True)
    per_batch = rate * TRIGGER_S
    seconds = batches * TRIGGER_S
    start = dt.datetime(2026, 3, 1, tzinfo=dt.UTC)
    # 4.4 events a visit; visits start over the span and run on past it by a few minutes.
    events = synthetic_events(visits=int(rate * seconds / 4.4 * 1.25), start=start, span=dt.timedelta(seconds=seconds))
    table = events.select(list(COLUMNS)).sort_by("event_time")
    table = table.set_column(3, "event_time", pa.compute.cast(table["event_time"], pa.timestamp("ms", tz="UTC")))
    for n in range(batches):
        pq.write_table(table.slice(n * per_batch, per_batch), folder / f"batch-{n:04d}.parquet")
    return per_batch


def _tws_processor() -> Any:
    from pyspark.sql import Row
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

    class Visits(StatefulProcessor):
        def init(self, handle: StatefulProcessorHandle) -> None:
            self.handle = handle
            self.state = handle.getValueState("visits", "open STRING, timer_ms BIGINT")

        def _load(self) -> tuple[list[dict[str, Any]], int | None]:
            if not self.state.exists():
                return [], None
            opened, timer = self.state.get()  # type: ignore[misc]
            return json.loads(opened), timer

        def _store(self, visits: list[dict[str, Any]], old_timer: int | None) -> None:
            timer = _timer(visits)
            if old_timer is not None and old_timer != timer:
                self.handle.deleteTimer(old_timer)
            if not visits:
                self.state.clear()
                return
            if timer is not None and timer != old_timer:
                self.handle.registerTimer(timer)
            self.state.update((json.dumps(visits), timer))

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
            visits, timer = self._load()
            events = [
                (r.event_id, int(r.event_time.timestamp() * 1000), r.type, r.path, r.source, r.country) for r in rows
            ]
            visits, out = absorb(tuple(key), visits, events)
            visits, closed = close(tuple(key), visits, timerValues.getCurrentWatermarkInMs())
            self._store(visits, timer)
            out += closed
            for row in out:
                yield Row(**{name: row.get(name) for name in OUT_NAMES})

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any) -> Iterator[Any]:
            visits, _ = self._load()
            visits, out = close(tuple(key), visits, timerValues.getCurrentWatermarkInMs())
            self._store(visits, None)
            for row in out:
                yield Row(**{name: row.get(name) for name in OUT_NAMES})

        def close(self) -> None:
            pass

    return Visits()


def _pandas_state(key: tuple[str, str], frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
    visits: list[dict[str, Any]] = json.loads(state.get[0]) if state.exists else []
    if state.hasTimedOut:
        visits, out = close(key, visits, state.getCurrentWatermarkMs())
    else:
        events = []
        for frame in frames:
            ms = (
                frame["event_time"].astype("int64") // 10**6
                if frame["event_time"].dtype.kind == "M"
                else frame["event_time"]
            )
            cols = zip(
                frame["event_id"], ms, frame["type"], frame["path"], frame["source"], frame["country"], strict=True
            )
            events += [(e, int(t), k, p, s, c) for e, t, k, p, s, c in cols]
        visits, out = absorb(key, visits, events)
        visits, closed = close(key, visits, state.getCurrentWatermarkMs())  # a timeout not yet fired
        out += closed
    if visits:
        state.update((json.dumps(visits),))
        state.setTimeoutTimestamp(_timer(visits))
    else:
        state.remove()
    if out:
        yield pd.DataFrame(out, columns=OUT_NAMES)


def _query(spark: Any, candidate: str, source: Path, checkpoint: Path) -> Any:
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    schema = (
        "site_id STRING, visitor_id STRING, event_id STRING, event_time TIMESTAMP, type STRING, path STRING,"
        " source STRING, country STRING"
    )
    events = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(source))
    events = events.withWatermark("event_time", WATERMARK)
    keyed = events.groupBy("site_id", "visitor_id")
    if candidate in (SESSION_WINDOW, WITH_EVENTS):
        pv = F.col("type") == "pageview"
        carried = [F.collect_list(F.struct(*COLUMNS[2:])).alias("events")] if candidate == WITH_EVENTS else []
        rows = events.groupBy("site_id", "visitor_id", F.session_window("event_time", f"{GAP_MS // 1000} seconds")).agg(
            *carried,
            F.min("event_time").alias("start"),
            F.max("event_time").alias("end"),
            F.count_if(pv).alias("pageviews"),
            F.min(F.when(pv, F.struct("event_time", "path"))).alias("entry"),
            F.max(F.when(pv, F.struct("event_time", "path"))).alias("exit"),
            F.min(F.struct("event_time", "event_id", "source", "country")).alias("first"),
        )
        mode = "append"
    elif candidate == TWS:
        rows = keyed.transformWithState(_tws_processor(), OUT_DDL, "Update", "EventTime")
        mode = "update"
    else:
        rows = keyed.applyInPandasWithState(
            _pandas_state, OUT_DDL, "open STRING", "update", GroupStateTimeout.EventTimeTimeout
        )
        mode = "update"
    return (
        rows.writeStream.format("noop")
        .outputMode(mode)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .queryName(candidate.replace(" ", "_"))
        .start()
    )


def run_candidate(spark: Any, candidate: str, source: Path, home: Path) -> tuple[list[float], int]:
    """Each micro-batch's seconds (input batches only) and the rows it read in all."""
    query = _query(spark, candidate, source, home / "checkpoints" / candidate.replace(" ", "-"))
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"{candidate}: {query.exception()}")
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    seconds = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
    return seconds, sum(p["numInputRows"] for p in progress)


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


@in_temporary_home("visits-operator")
def measure(home: Path, quick: bool = False) -> list[Figure]:
    from jobs.spark import spark_session
    from tally.settings import load_settings

    settings = load_settings()
    spark = spark_session(
        settings,
        "tally-bench-visits-operator",
        extra={
            "spark.sql.streaming.stateStore.providerClass": (
                "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
            ),
            "spark.sql.shuffle.partitions": str(CORES),
            "spark.sql.streaming.numRecentProgressUpdates": "1000",
        },
    )
    figures: list[Figure] = []
    try:
        for rate in (500,) if quick else (500, 2000):
            batches = (12 if quick else 40) if rate == 500 else (8 if quick else 14)
            source = home / f"events-{rate}"
            per_batch = write_batches(source, rate, batches)
            # applyInPandasWithState is left out at the higher rate: 4x slower than transformWithState
            # at 500/s already, its 14 batches there would take about 10 minutes.
            for candidate in CANDIDATES if rate == 500 else CANDIDATES[:-1]:
                started = time.monotonic()
                seconds, rows = run_candidate(spark, candidate, source, home / f"run-{rate}")
                steady = seconds[WARM_BATCHES:]
                median = statistics.median(steady)
                print(
                    f"{rate} events/s, {candidate}: {len(seconds)} batches of {per_batch} events ({rows} rows) in"
                    f" {time.monotonic() - started:.0f} s; batch median {median:.2f} s, p95 {_p95(steady):.2f} s",
                    flush=True,
                )
                base = f"micro-batch of {per_batch:,} events: median ({SESSION_WINDOW})"
                note = f"{len(steady)} steady batches, {rate} events/s of event time, {TRIGGER_S} s a batch"
                figures += [
                    Figure(
                        f"micro-batch of {per_batch:,} events: median ({candidate})",
                        median * 1000,
                        "ms",
                        None if candidate == SESSION_WINDOW else base,
                        note=note,
                    ),
                    Figure(f"micro-batch of {per_batch:,} events: p95 ({candidate})", _p95(steady) * 1000, "ms"),
                    Figure(
                        f"events a second one core sustains at {rate}/s ({candidate})",
                        per_batch / median / CORES,
                        "events/s",
                    ),
                ]
    finally:
        spark.stop()
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.visits_operator", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer batches, 500 events/s only")
    print_figures(measure(parser.parse_args(argv).quick))


if __name__ == "__main__":
    main()
