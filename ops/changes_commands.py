"""``tally changes``: the settings' audit trail (:mod:`tally.changes`), newest last."""

from __future__ import annotations

import argparse

from tally.changes import load_changes
from tally.settings import Settings


def add_changes_arguments(parser: argparse.ArgumentParser) -> None:
    """``tally changes [--site S] [--last N]``."""
    parser.add_argument("--site", help="only this site's changes (and those of every site, such as admin keys)")
    parser.add_argument("--last", type=int, default=50, metavar="N", help="the newest N changes (default 50)")


def run_changes(args: argparse.Namespace, settings: Settings) -> int:
    """Print the trail: when, who, how, the site, what and the action, and what changed."""
    if args.last < 1:
        print("tally changes: --last takes 1 or more")
        return 2
    found = load_changes(settings, site_ids=(args.site,) if args.site else None)[-args.last :]
    if not found:
        print("no settings changes recorded yet (tally site, user, apikey and share record theirs)")
        return 0
    print(f"{'WHEN (UTC)':<25}  {'WHO':<24}  {'HOW':<12}  {'SITE':<24}  CHANGE")
    for c in found:
        print(f"{c.at:<25}  {c.actor[:24]:<24}  {c.via:<12}  {c.site_id[:24]:<24}  {c.subject} {c.action}: {c.detail}")
    return 0
