"""Run the archiver: ``python -m archiver``."""

from __future__ import annotations

import argparse
import faulthandler
import signal

from archiver.consumer import Archiver
from tally.log import setup_logging
from tally.settings import load_settings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m archiver",
        description="Archive Kafka topics pageviews and pageviews.rejected into Delta (raw.*), exactly once.",
    )
    parser.parse_args(argv)
    setup_logging()
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1 <pid>: every thread's stack to the log
    Archiver(load_settings()).run()


if __name__ == "__main__":
    main()
