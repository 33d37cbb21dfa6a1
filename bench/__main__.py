"""Run every benchmark in bench/ and print its figures: ``make bench``."""

from __future__ import annotations

import argparse

from bench import archiver, ingest, stack


def main() -> None:
    argparse.ArgumentParser(prog="python -m bench", description="Run every Tally benchmark.").parse_args()
    print("== stack: start-up time and resident memory", flush=True)
    stack.main([])
    print("\n== ingest: open loop, against a bare endpoint on the same server stack", flush=True)
    ingest.main([])
    print("\n== archiver: throughput and beacon -> raw latency", flush=True)
    archiver.main([])


if __name__ == "__main__":
    main()
