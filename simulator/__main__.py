"""Run the traffic generator until stopped: ``python -m simulator`` (see ``tally traffic --help``)."""

from ops.cli import main

if __name__ == "__main__":
    main(["traffic"])
