"""``python -m tally`` is the ``tally`` command."""

from ops.cli import main

main()
