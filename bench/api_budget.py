"""The raw budget's benchmark: one key keeps heavy raw questions coming while a second key asks
simple ones; the second key's latency with the budget (``api.raw_slots`` …, the defaults) side by
side with the budget disabled, in the same run.

Each variant is an API process of its own (``python -m api`` on a free loopback port, its own
spill directory), over the same raw table: synthetic events (``simulator.synthetic``) over 400 days,
only ``raw.pageviews`` (every question here is answered from raw events, so no view is built).
The heavy key keeps ``HEAVY_AT_ONCE`` questions outstanding (the issue's six: the whole range,
four dimensions, a ``matches`` filter, visit metrics), each sent again as soon as it is answered or
refused, as a client that ignores ``Retry-After`` would. Meanwhile the light key asks one simple
question at a time (a week of one country's visitors and page views, answered from raw events:
it needs a slot too), and its latency is timed. Disabled means what the API did before: a slot
for every question (the server's 40 threads the only bound), each with 2 GB and 2 DuckDB threads,
in the API's own threads; with the budget, each question runs in a worker process of its slot
(``api.raw_in_processes``, the default).

The two processes take turns, ABBA (disabled, budget, budget, disabled), each turn starting a new
process that first answers a few light questions alone (a warm-up and the latency without load).
A turn ends when the light key has its samples; the process and its workers are then killed (what
they were still answering is not waited for). The resident memory of the API process and its
workers together is sampled through the turn.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
from deltalake import write_deltalake

from bench.homes import in_temporary_home
from bench.report import Figure, print_figures
from ops.stack import stack_env
from simulator.synthetic import synthetic_events
from tally.log import setup_logging
from tally.settings import load_settings

SITE = "demo.tally.local"  # simulator.synthetic's default site
DAYS = 400  # the longest range the API answers
EVENTS_PER_VISIT = 4.4  # what simulator.synthetic makes on average
CHUNK_DAYS = 50  # events written a chunk of days at a time: a few commits, not one a day
HEAVY_AT_ONCE = 6
NO_BUDGET, BUDGET = "no budget", "budget"
VARIANTS = (NO_BUDGET, BUDGET)
TURNS = (NO_BUDGET, BUDGET, BUDGET, NO_BUDGET)
ALONE = 20  # light questions timed before the heavy ones start, after 2 not timed
START_WAIT_S = 60  # for a new API process to answer /healthz
# Disabled: as many slots as the server has threads and more, each with the 2 GB (1907 MiB) and the
# 2 DuckDB threads a raw question had before the budget.
UNBOUNDED_SLOTS = 10_000
NO_BUDGET_ENV = {
    "TALLY_API__RAW_SLOTS": str(UNBOUNDED_SLOTS),
    "TALLY_API__RAW_SLOTS_PER_KEY": str(UNBOUNDED_SLOTS),
    "TALLY_API__RAW_MEMORY": f"{UNBOUNDED_SLOTS * 1907}m",
    "TALLY_API__RAW_THREADS": "2",
    "TALLY_API__RAW_IN_PROCESSES": "false",  # in the API's threads, as before the budget
}
NOTE = (
    "One run: two API processes take turns, ABBA (budget disabled, budget, budget, disabled), over the same raw"
    " table (synthetic events over 400 days, raw.pageviews only), so a run is its own side by side comparison."
    " In each turn a new `python -m api` first answers the light key's simple question alone (2 not timed, then"
    f" {ALONE} timed), then the heavy key keeps {HEAVY_AT_ONCE} questions outstanding (400 days; time:day,"
    " visit:country, visit:browser, event:page; a `matches` filter on the page; visitors, visits, bounce rate,"
    " page views), each sent again as soon as it is answered or refused, while the light key asks its question"
    " (7 days, one country's visitors and page views: a raw question, which needs a slot too) one at a time and"
    " is timed. Budget: the defaults (see the figures' note), each raw question in a worker process of its slot."
    " Disabled: a slot for every question, each with 2 GB and 2 DuckDB threads, in the API's own threads, as"
    " before the budget. A turn ends when the light key has its samples, and its process and workers are killed;"
    " counts are over both turns of a variant. Resident memory: the API process's and its workers' together,"
    " sampled every 0.2 s."
)


def write_raw(uri: str, events: int, last: dt.date) -> int:
    """About ``events`` synthetic events over the :data:`DAYS` days ending on ``last``; the exact count."""
    first = dt.datetime.combine(last - dt.timedelta(days=DAYS - 1), dt.time(), dt.UTC)
    written = 0
    for chunk, offset in enumerate(range(0, DAYS, CHUNK_DAYS)):
        days = min(CHUNK_DAYS, DAYS - offset)
        table = synthetic_events(
            visits=int(events / EVENTS_PER_VISIT * days / DAYS),
            start=first + dt.timedelta(days=offset),
            span=dt.timedelta(days=days),
            seed=chunk,
            site_id=SITE,
        )
        write_deltalake(uri, table, mode="append", partition_by=["event_date"])
        written += table.num_rows
    return written


def heavy_question(last: dt.date) -> dict[str, Any]:
    """The issue's question: the whole 400 days, four dimensions, a ``matches`` filter, visit metrics."""
    return {
        "site_id": SITE,
        "date_range": [(last - dt.timedelta(days=DAYS - 1)).isoformat(), last.isoformat()],
        "metrics": ["visitors", "visits", "bounce_rate", "pageviews"],
        "dimensions": ["time:day", "visit:country", "visit:browser", "event:page"],
        "filters": [["matches", "event:page", ["^/(docs|blog|pricing)"]]],
    }


def light_question(last: dt.date) -> dict[str, Any]:
    """A simple question raw events answer: a week of one country's visitors and page views."""
    return {
        "site_id": SITE,
        "date_range": [(last - dt.timedelta(days=6)).isoformat(), last.isoformat()],
        "metrics": ["visitors", "pageviews"],
        "filters": [["is", "visit:country", ["DE"]]],
    }


@dataclass
class Turn:
    """What one turn of one variant measured."""

    alone_ms: list[float] = field(default_factory=list)
    loaded_ms: list[float] = field(default_factory=list)
    light_refused: int = 0
    heavy: Counter[int] = field(default_factory=Counter)  # status -> heavy answers
    heavy_ms: list[float] = field(default_factory=list)  # of the heavy questions answered
    peak_rss: int = 0
    seconds: float = 0.0


@contextmanager
def api_process(home: Path, env: dict[str, str], name: str) -> Iterator[tuple[str, psutil.Process]]:
    """``python -m api`` on a free loopback port with ``env``; yields its query URL and process, then kills it."""
    port = int(env["TALLY_API__PORT"])
    tmp = home / f"tmp-{name}"  # its DuckDB spills here, inside the run's home
    tmp.mkdir(exist_ok=True)
    log = (home / f"api-{name}.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "api", "--port", str(port)], env={**env, "TMPDIR": str(tmp)}, stdout=log, stderr=log
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_WAIT_S
        while True:
            assert process.poll() is None, f"the API exited at start-up: see {log.name}"
            assert time.monotonic() < deadline, f"the API did not answer /healthz within {START_WAIT_S} s"
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        yield f"{base}/api/v2/query", psutil.Process(process.pid)
    finally:
        # It and its raw question workers (which would end within a second, but may be answering a
        # heavy question in the next turn's first second): what they were still answering is not waited for.
        kill_tree(psutil.Process(process.pid))
        process.wait(timeout=30)
        log.close()


def kill_tree(process: psutil.Process) -> None:
    """Kill -9 a process and every process it started."""
    try:
        children = process.children(recursive=True)
    except psutil.Error:
        children = []
    for each in [process, *children]:
        try:
            each.kill()
        except psutil.Error:
            continue
    psutil.wait_procs(children, timeout=30)


def tree_rss(process: psutil.Process) -> int:
    """Resident memory of a process and every process it started (the API and its raw question workers)."""
    total = process.memory_info().rss
    for child in process.children(recursive=True):
        try:
            total += child.memory_info().rss
        except psutil.Error:
            continue
    return total


def timed_post(client: httpx.Client, url: str, body: dict[str, Any]) -> tuple[int, float]:
    t0 = time.perf_counter()
    status = client.post(url, json=body).status_code
    return status, (time.perf_counter() - t0) * 1000


def one_turn(home: Path, env: dict[str, str], name: str, keys: tuple[str, str], last: dt.date, samples: int) -> Turn:
    """One variant's turn: the light key alone, then under the heavy key's load (see the module's doc)."""
    heavy_key, light_key = keys
    turn, stop, counting = Turn(), threading.Event(), threading.Lock()
    heavy_body, light_body = heavy_question(last), light_question(last)
    with api_process(home, env, name) as (url, process):
        light = httpx.Client(headers={"Authorization": f"Bearer {light_key}"}, timeout=600)
        for i in range(2 + ALONE):
            status, ms = timed_post(light, url, light_body)
            assert status == 200, f"the light question alone got {status}"
            if i >= 2:
                turn.alone_ms.append(ms)

        def heavy() -> None:
            with httpx.Client(headers={"Authorization": f"Bearer {heavy_key}"}, timeout=600) as client:
                while not stop.is_set():
                    try:
                        status, ms = timed_post(client, url, heavy_body)
                    except httpx.TransportError:  # the process was killed at the end of the turn
                        return
                    if stop.is_set():
                        return
                    with counting:
                        turn.heavy[status] += 1
                        if status == 200:
                            turn.heavy_ms.append(ms)

        def sample_memory() -> None:
            while not stop.wait(0.2):
                try:
                    turn.peak_rss = max(turn.peak_rss, tree_rss(process))
                except psutil.Error:
                    return

        threads = [threading.Thread(target=heavy, daemon=True) for _ in range(HEAVY_AT_ONCE)]
        threads.append(threading.Thread(target=sample_memory, daemon=True))
        began = time.monotonic()
        for thread in threads:
            thread.start()
        time.sleep(1)  # the heavy questions are in: running, or waiting for a slot
        while len(turn.loaded_ms) < samples:
            status, ms = timed_post(light, url, light_body)
            if status == 200:
                turn.loaded_ms.append(ms)
            else:
                turn.light_refused += 1
        turn.seconds = time.monotonic() - began
        stop.set()
        light.close()
    for thread in threads:
        thread.join(timeout=60)
    return turn


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, round(0.95 * len(ordered)) - 1)]


def figures_of(variant: str, turns: list[Turn]) -> list[Figure]:
    """One variant's figures over its turns, named ``<what> (<variant>)`` (the harness pairs them)."""
    alone = [ms for t in turns for ms in t.alone_ms]
    loaded = [ms for t in turns for ms in t.loaded_ms]
    heavy: Counter[int] = sum((t.heavy for t in turns), Counter())
    heavy_ms = [ms for t in turns for ms in t.heavy_ms]
    seconds = sum(t.seconds for t in turns)
    baseline = (lambda what: f"{what} ({NO_BUDGET})") if variant != NO_BUDGET else (lambda what: None)
    under = "second key's question under load"
    others = sum(n for status, n in heavy.items() if status not in (200, 429))
    return [
        Figure(
            f"second key's question alone: p50 ({variant})",
            statistics.median(alone),
            "ms",
            baseline("second key's question alone: p50"),
            note=f"{len(alone)} asked before the load",
        ),
        Figure(
            f"second key's question alone: p95 ({variant})",
            p95(alone),
            "ms",
            baseline("second key's question alone: p95"),
        ),
        Figure(
            f"{under}: p50 ({variant})",
            statistics.median(loaded),
            "ms",
            baseline(f"{under}: p50"),
            note=f"{len(loaded)} asked one at a time",
        ),
        Figure(f"{under}: p95 ({variant})", p95(loaded), "ms", baseline(f"{under}: p95")),
        Figure(f"second key's questions refused ({variant})", sum(t.light_refused for t in turns), "requests"),
        Figure(f"heavy questions answered ({variant})", heavy[200], "requests", note=f"over {seconds:.0f} s of load"),
        Figure(f"heavy questions refused with 429 ({variant})", heavy[429], "requests"),
        Figure(f"heavy questions refused or failed otherwise ({variant})", others, "requests"),
        Figure(f"heavy question answered: p50 ({variant})", statistics.median(heavy_ms) if heavy_ms else 0.0, "ms"),
        Figure(
            f"API peak resident memory, workers included ({variant})",
            max(t.peak_rss for t in turns) / 2**20,
            "MiB",
            baseline("API peak resident memory, workers included"),
        ),
    ]


@in_temporary_home("api-budget")
def measure(home: Path, quick: bool = False, *, events: int | None = None, samples: int | None = None) -> list[Figure]:
    """One run: the raw table, two keys, then the ABBA turns of the two variants."""
    from api.keys import create_key

    events = events or (100_000 if quick else 200_000)
    samples = samples or (3 if quick else 20)
    os.environ.update(stack_env(home))  # the harness puts the environment back after the run
    os.environ |= {"TALLY_WAREHOUSE__PATH": str(home / "warehouse"), "TALLY_API__REQUESTS_PER_HOUR": str(10**9)}
    settings = load_settings()
    last = dt.datetime.now(dt.UTC).date()
    t0 = time.perf_counter()
    written = write_raw(settings.table_uri("raw.pageviews"), events, last)
    print(f"{written:,} events over {DAYS} days written to raw in {time.perf_counter() - t0:.0f} s", flush=True)
    now = dt.datetime.now(dt.UTC)
    keys = tuple(create_key(settings, name=name, sites=(SITE,), now=now)[0] for name in ("heavy", "light"))
    env = dict(os.environ)
    by_variant: dict[str, list[Turn]] = {v: [] for v in VARIANTS}
    for n, variant in enumerate(TURNS):
        own = env | (NO_BUDGET_ENV if variant == NO_BUDGET else {})
        turn = one_turn(home, own, f"{n}-{variant.replace(' ', '-')}", (keys[0], keys[1]), last, samples)
        print(
            f"turn {n + 1} ({variant}): light p50 {statistics.median(turn.loaded_ms):.0f} ms under load,"
            f" heavy {dict(turn.heavy)}, peak {turn.peak_rss / 2**20:.0f} MiB, {turn.seconds:.0f} s",
            flush=True,
        )
        by_variant[variant].append(turn)
    figures = [f for variant in VARIANTS for f in figures_of(variant, by_variant[variant])]
    api = settings.api
    budget = (
        f"{api.raw_slots} slots, {api.raw_slots_per_key} a key, {api.raw_threads} DuckDB thread(s) a question,"
        f" {api.raw_memory}, {api.raw_wait_seconds:g} s wait"
    )
    return [Figure("raw events", written, "events", note=f"over {DAYS} days; the budget: {budget}"), *figures]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.api_budget", description=__doc__)
    parser.add_argument("--events", type=int, default=200_000, help="synthetic events over the 400 days")
    parser.add_argument("--samples", type=int, default=20, help="light questions timed under load per turn")
    parser.add_argument("--quick", action="store_true", help="100k events, 3 samples a turn (a smoke test)")
    args = parser.parse_args(argv)
    setup_logging()
    if args.quick:
        print_figures(measure(True))
    else:
        print_figures(measure(False, events=args.events, samples=args.samples))


if __name__ == "__main__":
    main()
