"""``tally import plausible|umami|list|remove``: a site's history from Plausible's CSV export (kept
in ``imported.daily``) or Umami's website export (its range's totals, in ``imported.ranges``), beside
the views built from the log (docs/IMPORT-EXPORT.md)."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

from ops.site_commands import with_sites_named
from tally.settings import Settings

EXIT_USAGE = 2


def add_import_arguments(parser: argparse.ArgumentParser) -> None:
    """``tally import plausible EXPORT.zip --site S``, ``tally import umami EXPORT --site S --from D --to D``,
    ``tally import list`` and ``tally import remove ID``."""
    sub = parser.add_subparsers(dest="import_action", required=True, metavar="ACTION")
    plausible = sub.add_parser(
        "plausible",
        help="Import Plausible's CSV export (the ZIP of Site settings > Imports & Exports > Export) into a site.",
        description="Import Plausible's CSV export into a site. Only the days before the site's own first event,"
        " and not held by an earlier import, are kept; nothing is stored unless every file is valid.",
    )
    plausible.add_argument("archive", type=Path, help="the export's .zip, as Plausible gave it")
    plausible.add_argument("--site", required=True, help="the Tally site to import into (tally site list)")
    plausible.set_defaults(action=run_plausible)
    umami = sub.add_parser(
        "umami",
        help="Import Umami's website export (GET /api/websites/{id}/export: its JSON answer, or the ZIP in it)"
        " into a site.",
        description="Import Umami's website export into a site: each page's, referrer's, browser's, OS's,"
        " device's and country's visitors (Umami's sessions) and each custom event's count, over the whole range"
        " the export was asked for, its top 500 values a file. The export holds no dates, so give its range:"
        " the Stats API adds these figures only to a question of one of those breakdowns whose dates hold the"
        " whole range. A range that reaches the site's own first day or an earlier import is refused whole;"
        " nothing is stored unless every file is valid.",
    )
    umami.add_argument(
        "export", type=Path, help='the export\'s .zip, or the route\'s answer ({"zip": "<base64>"}) saved to a file'
    )
    umami.add_argument("--site", required=True, help="the Tally site to import into (tally site list)")
    umami.add_argument(
        "--from",
        dest="start",
        required=True,
        metavar="YYYY-MM-DD",
        help="the first day of the range the export was asked for (a day of the site's time zone)",
    )
    umami.add_argument("--to", dest="end", required=True, metavar="YYYY-MM-DD", help="its last day")
    umami.set_defaults(action=run_umami)
    listed = sub.add_parser("list", help="List the imports: id, site, range, rows, file and when.")
    listed.add_argument("--site", help="only this site's imports")
    listed.set_defaults(action=run_list)
    remove = sub.add_parser("remove", help="Remove one import, exactly its rows, in one commit.")
    remove.add_argument("import_id", help="the id `tally import list` shows")
    remove.set_defaults(action=run_remove)


def run_import(args: argparse.Namespace, settings: Settings) -> int:
    """Dispatch ``tally import <action>``."""
    code: int = args.action(args, settings)
    return code


def run_plausible(args: argparse.Namespace, settings: Settings) -> int:
    # Imported here: the readers load Arrow, which the other `tally` commands start without.
    from imports.plausible import read_export
    from imports.store import ImportRefused, add_import
    from tally.plausible_export import FormatError

    if not args.archive.is_file():
        print(f"tally import: no file {args.archive}", file=sys.stderr)
        return EXIT_USAGE
    settings = with_sites_named(settings, (args.site,))  # a site added at runtime may be imported into too
    print(f"reading {args.archive} ...", flush=True)
    try:
        export = read_export(args.archive, progress=lambda name, rows: print(f"  {name}: {rows:,} rows", flush=True))
        added = add_import(settings, args.site, export, origin="plausible", now=dt.datetime.now(dt.UTC))
    except (FormatError, ImportRefused) as e:
        print(f"tally import: {e}\nnothing was imported", file=sys.stderr)
        return EXIT_USAGE
    record = added.record
    print(
        f"import {record.import_id} into {record.site_id}: {sum(record.rows.values()):,} rows,"
        f" {record.first} to {record.last}"
    )
    if added.left_out_native:
        print(f"  left out {added.left_out_native} days from {added.first_native} on: the site's own events begin then")
    if added.left_out_imported:
        print(f"  left out {added.left_out_imported} days an earlier import holds (tally import list)")
    return 0


def run_umami(args: argparse.Namespace, settings: Settings) -> int:
    from imports.store import ImportRefused, add_range_import
    from imports.umami import read_umami
    from tally.plausible_export import FormatError
    from tally.umami_export import ROW_LIMIT

    def progress(name: str, rows: int) -> None:
        cut = f" (Umami's top {ROW_LIMIT}: values past them are not in the export)" if rows >= ROW_LIMIT else ""
        print(f"  {name}: {rows:,} rows{cut}", flush=True)

    try:
        start, end = dt.date.fromisoformat(args.start), dt.date.fromisoformat(args.end)
    except ValueError as e:
        print(f"tally import: --from and --to are days, YYYY-MM-DD ({e})\nnothing was imported", file=sys.stderr)
        return EXIT_USAGE
    if not args.export.is_file():
        print(f"tally import: no file {args.export}", file=sys.stderr)
        return EXIT_USAGE
    settings = with_sites_named(settings, (args.site,))
    print(f"reading {args.export} ...", flush=True)
    try:
        export = read_umami(args.export, progress=progress)
        record = add_range_import(
            settings, args.site, export, first=start, last=end, origin="umami", now=dt.datetime.now(dt.UTC)
        )
    except (FormatError, ImportRefused) as e:
        print(f"tally import: {e}\nnothing was imported", file=sys.stderr)
        return EXIT_USAGE
    print(
        f"import {record.import_id} into {record.site_id}: {sum(record.rows.values()):,} rows,"
        f" {record.first} to {record.last} as one range (the export has no dates)"
    )
    return 0


def run_list(args: argparse.Namespace, settings: Settings) -> int:
    from imports.store import imports

    found = imports(settings, args.site)
    if not found:
        print("no imports yet: tally import plausible EXPORT.zip --site SITE, or tally import umami EXPORT --site SITE")
        return 0
    print(f"{'ID':<32}  {'SITE':<24}  {'FROM':<10}  {'TO':<10}  {'ROWS':>9}  {'IMPORTED (UTC)':<16}  FILE")
    for r in found:
        rows = sum(r.rows.values())
        print(
            f"{r.import_id:<32}  {r.site_id:<24}  {r.first}  {r.last}  {rows:>9,}  {r.imported_at:%Y-%m-%d %H:%M}"
            f"  {r.file_name} ({r.origin}{'' if r.dated else ': one range, no dates'})"
        )
    return 0


def run_remove(args: argparse.Namespace, settings: Settings) -> int:
    from imports.store import remove_import

    removed = remove_import(settings, args.import_id)
    if removed is None:
        print(f"tally import: no import {args.import_id!r}; see tally import list", file=sys.stderr)
        return EXIT_USAGE
    print(f"removed import {removed.import_id} of {removed.site_id}: {sum(removed.rows.values()):,} rows")
    return 0
