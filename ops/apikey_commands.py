"""``tally apikey create|list|revoke``: keys of the Stats API (docs/API.md), scoped to sites;
``--admin`` keys also manage sites (``/api/v1/sites``)."""

from __future__ import annotations

import argparse
import datetime as dt
import sys

from api.keys import EVERY_SITE, ApiKeyError, create_key, load_keys, revoke_key
from ops.site_commands import SiteCommandError, current_sites
from tally.changes import COMMAND_LINE, command_line_actor, record_for_sites
from tally.settings import Settings

EXIT_USAGE = 2


def add_apikey_arguments(parser: argparse.ArgumentParser) -> None:
    """``tally apikey create|list|revoke``."""
    sub = parser.add_subparsers(dest="apikey_action", required=True, metavar="ACTION")
    create = sub.add_parser("create", help="Create a key; it is printed once and stored only as a hash.")
    create.add_argument("--name", required=True, help="what the key is for, e.g. 'weekly report script'")
    create.add_argument("--sites", default="", help="site ids the key may read, comma-separated, or * for every site")
    create.add_argument(
        "--admin",
        action="store_true",
        help="the key may also add, change and remove sites (POST/PUT/DELETE /api/v1/sites); --sites optional",
    )
    create.set_defaults(action=run_create)
    listed = sub.add_parser("list", help="List keys: id, name, sites, created, revoked (never the keys).")
    listed.set_defaults(action=run_list)
    revoke = sub.add_parser("revoke", help="Revoke a key at once, for every API process.")
    revoke.add_argument("key_id", help="the id `tally apikey list` shows")
    revoke.set_defaults(action=run_revoke)


def run_apikey(args: argparse.Namespace, settings: Settings) -> int:
    """Dispatch ``tally apikey <action>``."""
    code: int = args.action(args, settings)
    return code


def known_sites(settings: Settings, sites: tuple[str, ...]) -> set[str]:
    """The configured site ids to check ``sites`` against: conf/'s, and the runtime ones when a
    site is not in conf/ (read from Kafka only then, so that a key for conf/'s sites needs no broker)."""
    seeded = {s.site_id for s in settings.sites}
    if all(s == EVERY_SITE or s in seeded for s in sites):
        return seeded
    return {s.site_id for s in current_sites(settings).sites()}


def run_create(args: argparse.Namespace, settings: Settings) -> int:
    sites = tuple(dict.fromkeys(s.strip() for s in args.sites.split(",") if s.strip()))
    try:
        key, record = create_key(
            settings,
            name=args.name,
            sites=sites,
            now=dt.datetime.now(dt.UTC),
            admin=args.admin,
            known_sites=known_sites(settings, sites),
        )
    except ApiKeyError as e:
        print(f"tally apikey create: {e}", file=sys.stderr)
        return EXIT_USAGE
    except SiteCommandError as e:
        print(f"tally apikey create: {e}", file=sys.stderr)
        return e.code
    what = f"{'admin ' if record.admin else ''}key {record.key_id} ({record.name})"
    record_for_sites(
        settings,
        record.sites,
        actor=command_line_actor(),
        via=COMMAND_LINE,
        subject="api key",
        action="create",
        detail=f"{what}, sites {','.join(record.sites) or '-'}",
    )
    print(key)
    scope = ", ".join(record.sites) or "no site"
    print(
        f"{'admin ' if record.admin else ''}key {record.key_id} for {scope}: shown this once, stored only as a hash."
        " Use it as\n"
        f"  curl -H 'Authorization: Bearer {key[:8]}…' -H 'Content-Type: application/json' "
        f"http://{settings.api.host}:{settings.api.port}/api/v2/query -d '{{…}}'",
        file=sys.stderr,
    )
    return 0


def run_list(args: argparse.Namespace, settings: Settings) -> int:
    keys = load_keys(settings)
    if not keys:
        print("no API keys yet: tally apikey create --name NAME --sites SITE")
        return 0
    print(f"{'ID':<12}  {'NAME':<24}  {'CREATED':<25}  {'REVOKED':<25}  {'SCOPE':<5}  SITES")
    for key in sorted(keys.values(), key=lambda k: k.created):
        revoked, scope = key.revoked or "-", "admin" if key.admin else "read"
        sites = ",".join(key.sites) or "-"
        print(f"{key.key_id:<12}  {key.name[:24]:<24}  {key.created:<25}  {revoked:<25}  {scope:<5}  {sites}")
    return 0


def run_revoke(args: argparse.Namespace, settings: Settings) -> int:
    try:
        record = revoke_key(settings, args.key_id, now=dt.datetime.now(dt.UTC))
    except ApiKeyError as e:
        print(f"tally apikey revoke: {e}", file=sys.stderr)
        return EXIT_USAGE
    record_for_sites(
        settings,
        record.sites,
        actor=command_line_actor(),
        via=COMMAND_LINE,
        subject="api key",
        action="revoke",
        detail=f"key {record.key_id} ({record.name})",
    )
    print(f"revoked key {record.key_id} ({record.name}); requests with it now get 401")
    return 0
