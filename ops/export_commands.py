"""``tally export``: a site's figures as Plausible's CSV export ZIP, computed by the query layer
(docs/IMPORT-EXPORT.md), for moving to Plausible or keeping a copy; with ``--raw``, its raw events
as Parquet files, one per day."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, TypeVar

from ops.site_commands import with_sites_named
from tally.settings import Settings

EXIT_USAGE = 2
MAX_DAYS = 3_700  # about ten years: a longer range is a typo (one question a day, a file a day with --raw)
T = TypeVar("T")


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    """``tally export --site S --from D --to D [--raw] [--out FILE.zip]``."""
    parser.add_argument("--site", required=True, help="the site to export (tally site list)")
    parser.add_argument("--from", dest="start", required=True, help="the first day, YYYY-MM-DD (the site's local day)")
    parser.add_argument("--to", dest="end", required=True, help="the last day, YYYY-MM-DD")
    parser.add_argument(
        "--out",
        type=Path,
        help="the ZIP to write (default here: <site>_<today>.zip, as Plausible names it; with --raw"
        " <site>_raw_<from>_<to>.zip)",
    )
    parser.add_argument(
        "--raw",
        action="store_true",
        help="the site's raw events instead, as they are stored (no IP addresses: none is stored), one Parquet file"
        " per local day in the ZIP",
    )


def run_export(args: argparse.Namespace, settings: Settings) -> int:
    """Write the export ZIP; nothing is left behind when it fails or is interrupted."""
    # Imported here: the query layer loads DuckDB and Arrow, which the other `tally` commands start without.
    from query.export import export_rows, write_zip
    from query.sources import Sources

    try:
        start, end = dt.date.fromisoformat(args.start), dt.date.fromisoformat(args.end)
    except ValueError as e:
        print(f"tally export: --from and --to are days, YYYY-MM-DD ({e})", file=sys.stderr)
        return EXIT_USAGE
    if start > end:
        print(f"tally export: --to ({end}) is before --from ({start})", file=sys.stderr)
        return EXIT_USAGE
    if (end - start).days + 1 > MAX_DAYS:
        print(f"tally export: a range of at most {MAX_DAYS:,} days; export a longer one in parts", file=sys.stderr)
        return EXIT_USAGE
    settings = with_sites_named(settings, (args.site,))
    site = settings.site(args.site)
    if site is None:
        print(f"tally export: no site {args.site!r}; see tally site list", file=sys.stderr)
        return EXIT_USAGE
    if args.raw:
        return _export_raw(args, settings, site.site_id, site.timezone, start, end)
    out: Path = args.out or Path(f"{site.site_id.replace('.', '_')}_{dt.date.today():%Y%m%d}.zip")
    exact = Sources(settings).exact(site.site_id, prepared=True)  # the range sessionised once for all ten
    if exact is None:
        print(NO_EVENTS, file=sys.stderr)
        return EXIT_USAGE
    rows = export_rows(exact, site.site_id, start, end, site.timezone)
    _write_whole(out, lambda written: write_zip(written, rows, start, end, progress=_progress))
    print(f"exported {site.site_id}, {start} to {end}: {out}")
    return 0


NO_EVENTS = "tally export: no events have been archived yet (raw.pageviews is empty)"


def _export_raw(
    args: argparse.Namespace, settings: Settings, site_id: str, timezone: str, start: dt.date, end: dt.date
) -> int:
    from query import raw_export
    from tally.storage import arrow_dataset, find_table
    from tally.tables import RAW_PAGEVIEWS

    table = find_table(settings, RAW_PAGEVIEWS)
    if table is None:
        print(NO_EVENTS, file=sys.stderr)
        return EXIT_USAGE
    out: Path = args.out or Path(f"{site_id.replace('.', '_')}_raw_{start:%Y%m%d}_{end:%Y%m%d}.zip")
    raw = arrow_dataset(table)
    events = _write_whole(
        out, lambda written: raw_export.write_zip(written, raw, site_id, start, end, timezone, progress=_progress)
    )
    print(f"exported {events:,} raw events of {site_id}, {start} to {end}: {out}")
    return 0


def _progress(name: str, rows: int) -> None:
    print(f"  {name}: {rows:,} rows", flush=True)


def _write_whole(out: Path, write: Callable[[BinaryIO], T]) -> T:
    """``write`` into a hidden file beside ``out``, renamed to it when whole: an export interrupted
    (Ctrl-C, a crash, a full disk) leaves no file that looks finished, and removes its partial one."""
    partial = out.with_name(f".{out.name}.partial")
    try:
        with partial.open("wb") as written:
            result = write(written)
        partial.replace(out)
    finally:
        partial.unlink(missing_ok=True)
    return result
