"""Soak: the whole stack (broker, ingest, archiver, views, dashboard) under half of peak ingest rate
for 30 minutes (``--minutes``), sampling each process's resident memory (with its children) every 10 s.

Peak is measured first, on this same running stack, with bench.ingest's ramp (open loop; every
request 2xx and p99 < 100 ms), unless ``--rate`` gives the soak rate. The verdict per process
comes from the least-squares slope of its resident memory over the second half of the soak
(after warm-up): *flat* if it grows by less than 5% of its size per hour (or 10 MiB/h). At the
end, every byte at rest and every Kafka record is searched for the client IPs the load used.
With ``--native-memory``, the views JVM runs with native memory tracking and is also split into the
parts that can grow, once a minute (``bench/memory.py``: what the JVM committed to each, and the
resident size less all of that).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import functools
import json
import multiprocessing
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable

from bench.homes import in_temporary_home, keep_home
from bench.ingest import ramp
from bench.loadgen import Run, http_post, run_open_loop, summary
from bench.memory import memory_verdict, native_memory_env, slope_mib_per_hour, views_parts
from bench.report import Figure, print_figures
from bench.stack import rss_by_service, tally
from ops.stack import stack_env
from quality.leaks import Match, scan_at_rest
from tally.settings import PROJECT_ROOT

BROWSER = "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"  # views leave crawlers out
CLIENT_IPS = tuple(f"198.51.100.{n}" for n in range(101, 117))  # 16 documentation addresses (RFC 5737)
SAMPLE_S = 10.0
NMT_EVERY = 6  # samples: the views JVM's parts (jcmd) once a minute
PROBE_EVERY_S = 5.0  # a beacon with a page path of its own this often, watched for in agg.traffic_1m
WATCH_EVERY_S = 1.0
SERIES = PROJECT_ROOT / "bench" / "soak-memory.csv"
MINUTES = 30.0  # a soak's length unless given (bench --soak-minutes, bench.soak --minutes)


def title(minutes: float = MINUTES) -> str:
    """The soak's heading in BENCHMARKS.md."""
    return f"Soak: {minutes:g} minutes at half of peak ingest rate, resident memory over time"


def note(minutes: float = MINUTES) -> str:
    """The soak's method, for BENCHMARKS.md."""
    return f"One run ({minutes:g} minutes). " + _METHOD


_METHOD = (
    "Rate: given with --rate, or half of the peak that bench.ingest's ramp sustained"
    " on this same running stack just before the soak. Slope: least squares over the second half, after"
    " warm-up; flat = under 5% of the process's size (or 10 MiB) per hour. The views job is also shown by"
    " part (its Python driver, the Spark JVM, the Python workers the JVM starts; resident sizes summed, so"
    " pages the forked workers share are counted in each). The load generator runs in a process of its own,"
    " apart from the bench's samplers and probes. Views latency: a page view with its own path"
    " every 5 s among the soak's, watched for in agg.traffic_1m's new files every second."
    " Samples: `bench/soak-memory.csv`."
)


def beacon(port: int, salt: int, i: int) -> bytes:
    """The ``i``-th request: one page view, from a small set of known client IPs."""
    now = int(time.time() * 1000)
    site = "demo.tally.local"
    body = {"id": str(uuid.uuid4()), "s": site, "u": f"https://{site}/soak/{i % 40}", "te": now, "ts": now}
    headers = {
        "Content-Type": "text/plain",
        "User-Agent": f"Mozilla/5.0 (X11; Linux x86_64; rv:{100 + (salt + i) % 40}.0) Firefox/{100 + i % 40}.0",
        "X-Forwarded-For": CLIENT_IPS[i % len(CLIENT_IPS)],
    }
    return http_post("/api/event", port, json.dumps(body).encode(), headers)


def beacons(port: int, salt: int) -> Callable[[int], bytes]:
    """Open-loop request maker (a partial of a module-level function: it can be sent to the client's process)."""
    return functools.partial(beacon, port, salt)


def load_client() -> ProcessPoolExecutor:
    """The process the soak's load generator runs in, apart from the bench's own threads (the
    samplers and the probes' watcher, which reads Delta files every second): sharing their GIL, the
    generator's sends and the timing of their answers can wait on them, and that wait would be
    counted as ingest's latency. bench.ingest's ramp runs its generator alone in its process too."""
    return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))


def send_probes(port: int, stop: threading.Event, sent: dict[str, float]) -> None:
    """Every PROBE_EVERY_S, one page view whose path no other beacon has; records when it was sent."""
    with httpx.Client(timeout=10) as client:
        while not stop.wait(PROBE_EVERY_S):
            path, now = f"/probe/{uuid.uuid4().hex[:12]}", int(time.time() * 1000)
            body = {"id": str(uuid.uuid4()), "s": "demo.tally.local", "u": f"https://demo.tally.local{path}"}
            headers = {"Content-Type": "text/plain", "X-Forwarded-For": CLIENT_IPS[0], "User-Agent": BROWSER}
            sent_at = time.monotonic()
            with contextlib.suppress(httpx.HTTPError):
                if (
                    client.post(
                        f"http://127.0.0.1:{port}/api/event",
                        content=json.dumps(body | {"te": now, "ts": now}),
                        headers=headers,
                    ).status_code
                    == 202
                ):
                    sent[path] = sent_at


def watch_probes(uri: str, stop: threading.Event, seen: dict[str, float]) -> None:
    """Every WATCH_EVERY_S, read the files agg.traffic_1m's newest commits added (only those: the
    views job rewrites a minute's rows when it merges) and note when each probe path first shows."""
    read: set[str] = set()
    while not stop.wait(WATCH_EVERY_S):
        with contextlib.suppress(Exception):  # no table before the first batch; a file vacuumed meanwhile
            added = DeltaTable(uri).get_add_actions(flatten=True)
            for path in set(added.column("path").to_pylist()) - read:
                for value in probe_paths(pq.read_table(f"{uri}/{path}", columns=["dimension", "value"])):
                    seen.setdefault(value, time.monotonic())
                read.add(path)


def probe_paths(rows: pa.Table) -> list[str]:
    """The probes' page paths among a file's rows, picked out by Arrow (no Python loop over the rows)."""
    values = rows.column("value")
    chosen = pc.and_(pc.equal(rows.column("dimension"), "page"), pc.starts_with(values, "/probe/"))
    return [str(v) for v in values.filter(chosen).to_pylist()]


def _sample(
    home: Path, started: float, stop: threading.Event, rows: list[tuple[float, str, float]], native_memory: bool
) -> None:
    n = 0
    while not stop.wait(SAMPLE_S):
        now = time.monotonic() - started
        services = rss_by_service(home)  # before the views' parts: asking jcmd takes a moment
        parts = views_parts(home, native_memory=native_memory and n % NMT_EVERY == 0)
        rows.extend((now, name, mib) for name, mib in {**services, **parts}.items())
        n += 1


def _write_series(rows: list[tuple[float, str, float]]) -> None:
    with open(SERIES, "w", newline="") as f:
        csv.writer(f).writerows(
            [("seconds", "process", "resident_mib"), *((f"{t:.0f}", n, f"{m:.1f}") for t, n, m in rows)]
        )
    print(f"memory samples: {SERIES}", flush=True)


@in_temporary_home("soak")
def measure(
    home: Path,
    quick: bool = False,
    *,
    minutes: float | None = None,
    rate: float | None = None,
    native_memory: bool = False,
) -> list[Figure]:
    """One soak run on a private stack; the figures are slopes, sizes, latency and the leak scan."""
    minutes = minutes or (3.0 if quick else MINUTES)
    env = stack_env(home) | {
        "TALLY_ENV": "",
        "TALLY_RATELIMIT__CLIENT_PAGEVIEWS_PER_HOUR": "1000000000",
        "TALLY_RATELIMIT__SITE_EVENTS_PER_SECOND": "1000000000",
    }
    if native_memory:
        if shutil.which("jcmd") is None:
            raise RuntimeError("--native-memory needs the JDK's jcmd on the PATH (make setup installs a JDK)")
        env |= native_memory_env(env)
    port = int(env["TALLY_INGEST__PORT"])
    rows: list[tuple[float, str, float]] = []
    sent: dict[str, float] = {}
    seen: dict[str, float] = {}
    stop = threading.Event()
    client = load_client()
    try:  # `tally down` also when `tally up` failed or was interrupted half-way
        up = tally(env, "up")
        if up.returncode != 0:
            raise RuntimeError(f"tally up failed:\n{up.stderr[-3000:]}")
        peak = 2 * rate if rate else ramp({"soak peak": port}, beacons, 2.0 if quick else 4.0)["soak peak"]
        if peak <= 0:
            raise RuntimeError(
                "ingest did not sustain even the ramp's lowest rate (every request 2xx, p99 < 100 ms): is the"
                " machine busy with other work? Retry on a quieter machine, or give the rate with --rate"
            )
        soak_rate = rate or peak / 2
        how = "given with --rate" if rate else f"half of the {peak:,.0f}/s peak measured on this stack"
        print(f"soak: {soak_rate:,.0f} events/s ({how}) for {minutes:g} min", flush=True)
        client.submit(beacons(port, 0), 0).result()  # its process started, bench.soak imported, before the clock
        started = time.monotonic()
        sampler = threading.Thread(target=_sample, args=(home, started, stop, rows, native_memory), daemon=True)
        sampler.start()
        uri = str(home / "warehouse" / "agg" / "traffic_1m")
        probes = [
            threading.Thread(target=send_probes, args=(port, stop, sent), daemon=True),
            threading.Thread(target=watch_probes, args=(uri, stop, seen), daemon=True),
        ]
        for probe in probes:
            probe.start()
        latencies, late, errors, answered, segment = [], [], 0, 0, 0
        while time.monotonic() - started < minutes * 60:
            seconds = min(60.0, minutes * 60 - (time.monotonic() - started))
            late_segment = in_second_half(time.monotonic() - started, minutes)
            make = beacons(port, segment * 10**7)
            run: Run = client.submit(run_open_loop, port, make, rate=soak_rate, seconds=seconds).result()
            latencies += run.latencies_ms
            late += run.latencies_ms if late_segment else []
            errors += run.errors
            answered += sum(n for status, n in run.statuses.items() if status == 202)
            segment += 1
            print(f"  minute {segment}: {summary(run)}", flush=True)
        time.sleep(30)  # the probes of the last seconds reach the view too
        stop.set()
        sampler.join()
        for probe in probes:
            probe.join()
        _write_series(rows)  # before the leak scan, so the samples outlive a failed scan
        for line in latency_by_minute(sent, seen, started):
            print(line, flush=True)
        # Half an hour of traffic is ~10^5-10^6 records: reading them all back takes minutes, not one.
        scan = scan_at_rest(home, set(CLIENT_IPS), f"127.0.0.1:{env['TALLY_KAFKA__PORT']}", kafka_timeout=1800)
        print(f"leak scan: {scan.summary()}", flush=True)
        if scan.leaks:  # the files they are in are the evidence: the run's home is kept
            for leak in scan.leaks:
                print(f"client IP at rest: {leak.where} at byte {leak.offset} ({leak.form})", flush=True)
            keep_home(home, f"{len(scan.leaks)} client IPs found at rest")
    finally:
        stop.set()
        try:  # the stack first: the client may still be in a segment, which ends by itself within a minute
            tally(env, "down")
        finally:
            client.shutdown(cancel_futures=True)
    figures = _figures(rows, soak_rate, how, (latencies, late), errors, answered, scan.leaks, len(scan.chance))
    return figures + _view_latency(sent, seen, second_half=started + minutes * 30)


def in_second_half(elapsed_s: float, minutes: float) -> bool:
    """Whether a segment starting ``elapsed_s`` into the soak belongs to its second half (after warm-up)."""
    return elapsed_s >= minutes * 30


def latency_by_minute(sent: dict[str, float], seen: dict[str, float], started: float) -> list[str]:
    """The views' latency per minute of the soak (by when each probe was sent), to see a change in it."""
    by_minute: dict[int, list[float]] = {}
    for path, at in sent.items():
        if path in seen:
            by_minute.setdefault(int((at - started) // 60) + 1, []).append(seen[path] - at)
    lines = []
    for minute, lags in sorted(by_minute.items()):
        lags.sort()
        p50, p95 = lags[len(lags) // 2], lags[int(0.95 * (len(lags) - 1))]
        lines.append(f"  views latency, minute {minute}: p50 {p50:.1f} s, p95 {p95:.1f} s, of {len(lags)} seen")
    return lines


def _view_latency(sent: dict[str, float], seen: dict[str, float], second_half: float | None = None) -> list[Figure]:
    """The views' latency over the soak; with ``second_half`` (when it began), also over its second half
    alone: after warm-up, the half the memory slopes are fitted over."""
    # The views job's start-up is not its latency (bench.views times it apart): probes count from
    # the first one seen on.
    warm = min(seen.values(), default=float("inf"))
    counted = [p for p in sent if sent[p] >= warm]
    lags = sorted(seen[p] - sent[p] for p in counted if p in seen)
    note = (
        f"{len(lags)}/{len(counted)} probes seen: one page view with its own path every {PROBE_EVERY_S:g} s among"
        f" the soak's, sent once the first was in the view; agg.traffic_1m's new files read every {WATCH_EVERY_S:g} s"
    )
    if not lags:
        return [
            Figure("views: beacon -> agg.traffic_1m p95 during the soak", float("nan"), "s", goal="≤ 15 s", note=note)
        ]
    figures = [
        Figure("views: beacon -> agg.traffic_1m p50 during the soak", lags[len(lags) // 2], "s", note=note),
        Figure(
            "views: beacon -> agg.traffic_1m p95 during the soak",
            lags[int(0.95 * (len(lags) - 1))],
            "s",
            goal="≤ 15 s",
            note=note,
        ),
        Figure("views: beacon -> agg.traffic_1m max during the soak", lags[-1], "s"),
    ]
    late = [p for p in counted if second_half is not None and sent[p] >= second_half]
    late_lags = sorted(seen[p] - sent[p] for p in late if p in seen)
    if late_lags:
        late_note = f"{len(late_lags)}/{len(late)} probes sent in the second half seen"
        figures.append(
            Figure(
                "views: beacon -> agg.traffic_1m p95, second half of the soak",
                late_lags[int(0.95 * (len(late_lags) - 1))],
                "s",
                note=late_note,
            )
        )
    return figures


def _p99(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[int(0.99 * (len(ordered) - 1))] if ordered else float("nan")


def _figures(
    rows: list[tuple[float, str, float]],
    rate: float,
    how: str,
    latencies: tuple[list[float], list[float]],
    errors: int,
    answered: int,
    leaks: list[Match],
    chance: int,
) -> list[Figure]:
    """``latencies``: ingest's over the whole soak, and over the minutes of its second half."""
    whole, late = latencies
    figures = [
        Figure("soak rate", rate, "events/s", note=how),
        Figure("events accepted (202)", answered, "events", note=f"{errors} request errors"),
        Figure("ingest p99 over the soak", _p99(whole), "ms", goal="≤ 25 ms"),
        Figure(
            "ingest p99, second half of the soak",
            _p99(late),
            "ms",
            note="the minutes after warm-up (the views job's start and JIT), as the memory slopes",
        ),
    ]
    for name in sorted({n for _, n, _ in rows}):
        series = [(t, m) for t, n, m in rows if n == name]
        seconds, mib = [t for t, _ in series], [m for _, m in series]
        slope = slope_mib_per_hour(seconds, mib)
        size = float(np.median(mib[len(mib) // 2 :]))
        verdict = memory_verdict(slope, size)
        note = f"{verdict}; {mib[0]:,.0f} MiB at the first sample, {mib[-1]:,.0f} MiB at the last"
        figures.append(Figure(f"{name}: resident memory, second half (median)", size, "MiB"))
        figures.append(Figure(f"{name}: slope over the second half", slope, "MiB/h", goal="flat", note=note))
    figures.append(
        Figure(
            "client IPs found at rest",
            len(leaks),
            "matches",
            goal="0",
            note=f"{chance} chance matches of packed forms in compressed data",
        )
    )
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, help="how long to soak (default 30, quick 3)")
    parser.add_argument("--rate", type=float, help="events/s (default: half of the peak measured first)")
    parser.add_argument("--quick", action="store_true", help="a 3-minute soak (a smoke test)")
    parser.add_argument(
        "--native-memory",
        action="store_true",
        help="run the views JVM with native memory tracking and report its parts (heap, class metadata, code"
        " cache, threads, other tracked, untracked: RocksDB and malloc) once a minute; costs the JVM a little"
        " CPU and about 15 MiB, plus a jcmd call (a short-lived JVM) a minute",
    )
    args = parser.parse_args(argv)
    print_figures(measure(args.quick, minutes=args.minutes, rate=args.rate, native_memory=args.native_memory))


if __name__ == "__main__":
    main()
