"""``tally annotate``: notes on a site's days, shown on the dashboard's time series and in the API."""

from __future__ import annotations

import argparse
import datetime as dt
import getpass
import sys

from ops.site_commands import with_sites_named
from tally.annotations import AnnotationError, add_annotation, delete_annotation, load_annotations
from tally.settings import Settings

EXIT_USAGE = 2


def add_annotate_arguments(parser: argparse.ArgumentParser) -> None:
    """``tally annotate --site S --date D TEXT``, ``--list`` and ``--delete ID``."""
    parser.add_argument("text", nargs="?", help='the note, e.g. "launched the pricing page" (at most 280 characters)')
    parser.add_argument("--site", help="the site id (as in conf/tally.yaml)")
    parser.add_argument("--date", default="today", help="the UTC day: YYYY-MM-DD, today or yesterday (default today)")
    parser.add_argument("--list", action="store_true", help="list the annotations (of --site, if given)")
    parser.add_argument("--delete", metavar="ID", help="delete the annotation with this id (from --list)")


def run_annotate(args: argparse.Namespace, settings: Settings) -> int:
    """Add, list or delete annotations."""
    if args.list:
        notes = [a for a in load_annotations(settings) if args.site in (None, a.site_id)]
        if not notes:
            print('no annotations yet: tally annotate --site SITE --date YYYY-MM-DD "text"')
        for a in notes:
            print(f"{a.annotation_id}  {a.day}  {a.site_id:<24}  {a.text}  ({a.author})")
        return 0
    if args.delete:
        if delete_annotation(settings, args.delete):
            print(f"deleted annotation {args.delete}")
            return 0
        print(f"tally annotate: no annotation {args.delete!r}; see tally annotate --list", file=sys.stderr)
        return EXIT_USAGE
    if not args.site or not args.text:
        print(
            'tally annotate: give --site and the text, e.g. tally annotate --site example.com "launch"', file=sys.stderr
        )
        return EXIT_USAGE
    settings = with_sites_named(settings, (args.site,))  # a site added at runtime may be annotated too
    try:
        day = _day(args.date)
        note = add_annotation(
            settings, site_id=args.site, day=day, text=args.text, author=getpass.getuser(), now=dt.datetime.now(dt.UTC)
        )
    except AnnotationError as e:
        print(f"tally annotate: {e}", file=sys.stderr)
        return EXIT_USAGE
    print(f"annotation {note.annotation_id} on {note.day} for {note.site_id}: {note.text}")
    return 0


def _day(text: str) -> dt.date:
    today = dt.datetime.now(dt.UTC).date()
    if text in ("today", "yesterday"):
        return today - dt.timedelta(days=1 if text == "yesterday" else 0)
    try:
        return dt.date.fromisoformat(text)
    except ValueError as e:
        raise AnnotationError(f"--date {text!r} is not YYYY-MM-DD, today or yesterday") from e
