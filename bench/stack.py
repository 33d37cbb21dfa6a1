"""Stack benchmark: `tally up` until ready, until the first page views are visible, and the
resident memory of each process under steady generated traffic.

Runs a private stack (own home, free ports) and stops it afterwards. Prints its figures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
from deltalake import DeltaTable

from tests.integration.conftest import stack_env


def tally(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tally", *args], env={**os.environ, **env}, capture_output=True, text=True, timeout=600
    )


def view_rows(home: Path) -> int:
    try:
        minutes = DeltaTable(str(home / "warehouse" / "agg" / "traffic_1m")).to_pandas()
        return int(minutes[minutes["dimension"] == "all"]["pageviews"].sum())
    except Exception:
        return 0


def rss_by_service(home: Path) -> dict[str, float]:
    """Resident MiB per service, each including its children (uvicorn workers, Spark JVM)."""
    import json

    out = {}
    for pid_file in sorted((home / "run").glob("*.json")):
        proc = psutil.Process(json.loads(pid_file.read_text())["pid"])
        group = [proc, *proc.children(recursive=True)]
        out[pid_file.stem] = sum(p.memory_info().rss for p in group if p.is_running()) / 2**20
    return out


def run(seconds: float) -> None:
    home = Path(tempfile.mkdtemp(prefix="tally-bench-"))
    env = stack_env(home)
    ingest = f"http://127.0.0.1:{env['TALLY_INGEST__PORT']}"
    started = time.monotonic()
    up = tally(env, "up")
    up_s = time.monotonic() - started
    if up.returncode != 0:
        raise SystemExit(up.stderr)
    traffic = subprocess.Popen(
        [sys.executable, "-m", "tally", "traffic", "--rate", "20", "--duration", str(seconds), "--target", ingest],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while view_rows(home) == 0 and time.monotonic() - started < 300:
            time.sleep(0.5)
        visible_s = time.monotonic() - started
        samples: dict[str, list[float]] = {}
        while traffic.poll() is None:
            for name, mib in rss_by_service(home).items():
                samples.setdefault(name, []).append(mib)
            time.sleep(2)
        dash = httpx.get(f"http://127.0.0.1:{env['TALLY_DASHBOARD__PORT']}/_stcore/health", timeout=5).status_code
    finally:
        traffic.terminate()
        tally(env, "down")
    print(f"tally up until every service is ready: {up_s:.1f} s (setup already done)")
    print(f"tally up until the first page views are in agg.traffic_1m: {visible_s:.1f} s")
    print(f"resident memory under 20 beacons/s for {seconds:.0f} s (median / max MiB, with children):")
    for name, values in samples.items():
        print(f"  {name:<10} {statistics.median(values):7.0f} / {max(values):7.0f}")
    total = sum(statistics.median(v) for v in samples.values())
    print(f"  {'total':<10} {total:7.0f}   (dashboard health: {dash})")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.stack", description=__doc__)
    parser.add_argument("--seconds", type=float, default=60, help="traffic duration while sampling memory")
    run(parser.parse_args(argv).seconds)


if __name__ == "__main__":
    main()
