"""Run every benchmark in bench/ and print its figures: ``make bench``."""

from __future__ import annotations

import argparse

from bench import stack


def main() -> None:
    argparse.ArgumentParser(prog="python -m bench", description="Run every Tally benchmark.").parse_args()
    print("== stack: start-up time and resident memory")
    stack.main([])


if __name__ == "__main__":
    main()
