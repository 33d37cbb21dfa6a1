"""``tally export``: a site's figures as Plausible's CSV export ZIP, computed by the query layer
(docs/IMPORT-EXPORT.md), for moving to Plausible or keeping a copy."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

from ops.site_commands import with_sites_named
from tally.settings import Settings

EXIT_USAGE = 2


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    """``tally export --site S --from D --to D [--out FILE.zip]``."""
    parser.add_argument("--site", required=True, help="the site to export (tally site list)")
    parser.add_argument("--from", dest="start", required=True, help="the first day, YYYY-MM-DD (the site's local day)")
    parser.add_argument("--to", dest="end", required=True, help="the last day, YYYY-MM-DD")
    parser.add_argument(
        "--out", type=Path, help="the ZIP to write (default: <site>_<today>.zip here, named as Plausible names it)"
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
    settings = with_sites_named(settings, (args.site,))
    site = settings.site(args.site)
    if site is None:
        print(f"tally export: no site {args.site!r}; see tally site list", file=sys.stderr)
        return EXIT_USAGE
    out: Path = args.out or Path(f"{site.site_id.replace('.', '_')}_{dt.date.today():%Y%m%d}.zip")
    exact = Sources(settings).exact(site.site_id)
    if exact is None:
        print("tally export: no events have been archived yet (raw.pageviews is empty)", file=sys.stderr)
        return EXIT_USAGE
    partial = out.with_name(f".{out.name}.partial")
    try:
        with partial.open("wb") as written:
            rows = export_rows(exact, site.site_id, start, end, site.timezone)
            write_zip(written, rows, start, end, progress=lambda name, n: print(f"  {name}: {n:,} rows", flush=True))
        partial.replace(out)  # whole, or not at all
    finally:
        partial.unlink(missing_ok=True)
    print(f"exported {site.site_id}, {start} to {end}: {out}")
    return 0
