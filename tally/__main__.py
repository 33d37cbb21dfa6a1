"""``python -m tally`` is the ``tally`` command."""

from tally.cli import main

main()
