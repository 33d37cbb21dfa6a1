"""Sub-commands with actions (``tally user add``, ``tally report send``): the one way to declare them."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from tally.settings import Settings

# What an action runs: the parsed arguments and the settings in, the exit code out.
Handler = Callable[[argparse.Namespace, Settings], int]


def actions(parser: argparse.ArgumentParser, dest: str) -> Callable[[str, Handler, str], argparse.ArgumentParser]:
    """A function that adds one action to ``parser`` (its name, handler and help text) and returns its
    parser for the action's own arguments; the action chosen is stored in ``dest``, its handler in
    ``action``."""
    sub = parser.add_subparsers(dest=dest, required=True, metavar="ACTION")

    def action(name: str, handler: Handler, text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=text, description=text)
        p.set_defaults(action=handler)
        return p

    return action
