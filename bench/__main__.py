"""Run every benchmark in bench/ and print its figures: ``make bench``."""

from __future__ import annotations

import argparse

from bench import archiver, backfill, ingest, sketches, stack, views


def main() -> None:
    argparse.ArgumentParser(prog="python -m bench", description="Run every Tally benchmark.").parse_args()
    print("== stack: start-up time and resident memory", flush=True)
    stack.main([])
    print("\n== ingest: open loop, against a bare endpoint on the same server stack", flush=True)
    ingest.main([])
    print("\n== archiver: throughput and beacon -> raw latency", flush=True)
    archiver.main([])
    print("\n== streaming views: beacon -> agg.traffic_1m latency", flush=True)
    views.main([])
    print("\n== sketches: Tally's t-digest against the tdigest package", flush=True)
    sketches.main([])
    print("\n== backfill: 1M / 3M / 10M events into every view on local[2]; exact vs HLL", flush=True)
    backfill.main([])


if __name__ == "__main__":
    main()
