"""``tally site add|list|remove``: sites at runtime, on the compacted ``kafka.sites_topic``.

The seed is ``sites:`` in conf/tally.yaml; each command reads the topic to its end, folds it over
the seed (:class:`tally.site_registry.SiteRegistry`), and ``add`` and ``remove`` append one record.
Every ingest worker and the Stats API follow the topic, so a change counts within seconds and
survives their restarts. Removing a site stops ingest accepting its events; what is stored of it
stays (raw tables, views) until it is deleted.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from confluent_kafka import KafkaException

from ops import broker
from tally.changes import COMMAND_LINE, command_line_actor, record_site_change
from tally.salt_periods import SALT_PERIODS
from tally.settings import Settings, SettingsError, SiteSettings
from tally.site_registry import SiteRegistry, encode_removal, encode_site, new_site, site_json
from topics.sites import SiteWriteFailed, follow_sites, write_site_record

EXIT_USAGE = 2
EXIT_KAFKA = 1
READ_TIMEOUT_S = 15.0


class SiteCommandError(Exception):
    """A site command that cannot go on: the message says what to do next; ``code`` is the exit code."""

    def __init__(self, message: str, *, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


def _seeded(settings: Settings) -> str:
    return ", ".join(s.site_id for s in settings.sites) or "none"


def ensure_sites_topic(settings: Settings) -> None:
    """Make sure Kafka answers and the sites topic exists (an installation older than it gets it now)."""
    kafka = settings.kafka
    if not broker.broker_answers(kafka.servers, client_config=kafka.client_config()):
        raise SiteCommandError(
            f"Kafka at {kafka.servers} does not answer: is it up (tally status; tally up starts it)? "
            f"The sites of conf/tally.yaml alone are: {_seeded(settings)}",
            code=EXIT_KAFKA,
        )
    try:
        broker.ensure_topics(settings)
    except KafkaException as e:
        raise SiteCommandError(
            f"could not create the topic {kafka.sites_topic} ({e}); "
            "create it compacted with 1 partition, or let Tally's Kafka user create topics",
            code=EXIT_KAFKA,
        ) from e


def with_sites_named(settings: Settings, site_ids: tuple[str, ...]) -> Settings:
    """``settings`` with the runtime sites folded in when one of ``site_ids`` is not in conf/'s
    ``sites:`` (Kafka is read only then, so commands about conf/'s sites need no broker). When the
    topic cannot be read, conf/'s sites alone, and a line on stderr says why."""
    seeded = {s.site_id for s in settings.sites}
    if all(site in seeded or site == "*" for site in site_ids):
        return settings
    return with_runtime_sites(settings)


def with_runtime_sites(settings: Settings) -> Settings:
    """``settings`` with the sites configured now (conf/'s folded with the sites topic); when the
    topic cannot be read, conf/'s sites alone, and a line on stderr says why."""
    try:
        return settings.with_sites(current_sites(settings).sites())
    except SiteCommandError as e:
        print(f"sites added with tally site could not be read, only conf/'s are known: {e}", file=sys.stderr)
        return settings


def current_sites(settings: Settings, *, timeout: float = READ_TIMEOUT_S) -> SiteRegistry:
    """The sites configured now: the seed folded with the whole sites topic, read to its end."""
    ensure_sites_topic(settings)
    registry = SiteRegistry(seed=settings.sites)
    follower = follow_sites(settings.kafka, registry, reader="tally site")
    try:
        if not follower.caught_up.wait(timeout):
            raise SiteCommandError(
                f"could not read the topic {settings.kafka.sites_topic} from Kafka at {settings.kafka.servers} "
                f"within {timeout:.0f}s: is Kafka up (tally status; tally up starts it)? "
                f"The sites of conf/tally.yaml alone are: {_seeded(settings)}",
                code=EXIT_KAFKA,
            )
    finally:
        follower.close()
    return registry


def write_record(settings: Settings, site_id: str, value: bytes, *, timeout: float = READ_TIMEOUT_S) -> None:
    """Append one record to the sites topic (:func:`current_sites` made sure it exists), acks=all."""
    try:
        write_site_record(settings.kafka, site_id, value, timeout=timeout)
    except SiteWriteFailed as e:
        raise SiteCommandError(
            f"Kafka did not store the record for {site_id} ({e}); "
            "nothing changed: check `tally status` and run the command again",
            code=EXIT_KAFKA,
        ) from e


def add_site(settings: Settings, site: SiteSettings, *, replace: bool = False) -> str:
    """Add a site, or with ``replace`` write an existing one again; ``added`` or ``changed``."""
    registry = current_sites(settings)
    exists = registry.get(site.site_id) is not None
    if exists and not replace:
        raise SiteCommandError(
            f"site {site.site_id} is already configured; to change it, run the same command with --replace "
            "(every option not given goes back to its default)"
        )
    write_record(settings, site.site_id, encode_site(site, at_ms=int(time.time() * 1000)))
    record_site_change(
        settings, actor=command_line_actor(), via=COMMAND_LINE, before=registry.get(site.site_id), after=site
    )
    return "changed" if exists else "added"


def remove_site(settings: Settings, site_id: str) -> SiteSettings:
    """Remove a configured site (a "removed" record); the settings it had."""
    registry = current_sites(settings)
    site = registry.get(site_id)
    if site is None:
        known = ", ".join(s.site_id for s in registry.sites()) or "none"
        raise SiteCommandError(f"no site {site_id!r} is configured (configured: {known}); `tally site list` shows them")
    write_record(settings, site_id, encode_removal(at_ms=int(time.time() * 1000)))
    record_site_change(settings, actor=command_line_actor(), via=COMMAND_LINE, before=site, after=None)
    return site


def _names(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def site_from_args(args: argparse.Namespace) -> SiteSettings:
    """The site ``tally site add`` describes, checked (:class:`SiteCommandError` says what to fix)."""
    values: dict[str, Any] = {
        "site_id": args.site_id,
        "domains": _names(args.domains),
        "salt_period": args.salt_period,
        "hash_routing": args.hash_routing,
        "query_params": _names(args.query_params),
        "goals": _names(args.goals),
        "client_pageviews_per_hour": args.client_pageviews_per_hour,
        "honour_opt_out": args.honour_opt_out,
        "timezone": args.timezone,
        "embed_origins": _names(args.embed_origins),
    }
    if not values["domains"]:
        raise SiteCommandError("give the hosts whose pages send for the site: --domains example.com,www.example.com")
    if args.client_pageviews_per_hour < 0:
        raise SiteCommandError("--client-pageviews-per-hour: give 0 (the default limit) or more")
    try:
        return new_site(values)
    except SettingsError as e:
        raise SiteCommandError(str(e)) from e


def add_site_arguments(parser: argparse.ArgumentParser) -> None:
    """``tally site add|list|remove``."""
    sub = parser.add_subparsers(dest="site_action", required=True, metavar="ACTION")
    add = sub.add_parser(
        "add",
        help="Add a site (or change one, with --replace); ingest accepts its events within seconds.",
        description="Add a site at runtime: every ingest worker and the Stats API follow it within seconds, "
        "without a restart. Sites in conf/tally.yaml are the seed; this record overrides them.",
    )
    add.add_argument("site_id", help="the site's id, as the snippet's data-site sends it, e.g. example.com")
    add.add_argument("--domains", required=True, help="hosts whose pages may send, e.g. example.com,www.example.com")
    add.add_argument(
        "--salt-period", default="day", choices=SALT_PERIODS, help="how long visitor ids last (default day)"
    )
    add.add_argument("--hash-routing", action="store_true", help="keep #/route in URLs (sites that route by it)")
    add.add_argument("--query-params", help="query parameters kept in page URLs besides utm_*, e.g. ref,lang")
    add.add_argument("--goals", help="Stats API goals, e.g. event:signup,page:/pricing (none: every event)")
    add.add_argument(
        "--client-pageviews-per-hour",
        type=int,
        default=0,
        metavar="N",
        help="page views per client and hour (default 0: ratelimit.client_pageviews_per_hour)",
    )
    add.add_argument("--honour-opt-out", action="store_true", help="drop events of requests with DNT: 1 or Sec-GPC: 1")
    add.add_argument(
        "--timezone", default="UTC", help="IANA zone the site's days are counted in, e.g. Europe/Berlin (default UTC)"
    )
    add.add_argument(
        "--embed-origins",
        help="origins whose pages may show the site's share links in a frame, e.g. https://www.example.com",
    )
    add.add_argument("--replace", action="store_true", help="write an existing site again, exactly as given")
    add.set_defaults(action=run_add)
    listed = sub.add_parser(
        "list", help="List the configured sites: conf/tally.yaml's folded with the runtime records."
    )
    listed.add_argument("--json", action="store_true", help="every site's settings as JSON, one site a line")
    listed.set_defaults(action=run_list)
    remove = sub.add_parser(
        "remove",
        help="Remove a site: ingest refuses its events (403) within seconds; its stored data stays.",
        description="Remove a site at runtime. Ingest then refuses its events as an unknown site's; its events "
        "already stored stay in raw.pageviews and the views until deleted. Add it again with tally site add.",
    )
    remove.add_argument("site_id", help="the id `tally site list` shows")
    remove.set_defaults(action=run_remove)


def run_site(args: argparse.Namespace, settings: Settings) -> int:
    """Dispatch ``tally site <action>``; a :class:`SiteCommandError` is one line on stderr."""
    try:
        code: int = args.action(args, settings)
    except SiteCommandError as e:
        print(f"tally site {args.site_action}: {e}", file=sys.stderr)
        return e.code
    return code


def run_add(args: argparse.Namespace, settings: Settings) -> int:
    site = site_from_args(args)
    what = add_site(settings, site, replace=args.replace)
    print(f"{what} site {site.site_id} ({', '.join(site.domains)}); ingest accepts its events within seconds")
    if what == "added":
        print(
            f'  snippet: <script defer data-site="{site.site_id}" src="<ingest URL>/t.js"></script>',
            file=sys.stderr,
        )
    return 0


def run_list(args: argparse.Namespace, settings: Settings) -> int:
    registry = current_sites(settings)
    if args.json:
        for site in registry.sites():
            print(json.dumps(site_json(site) | {"origin": registry.origin(site.site_id)}))
        return 0
    if not registry.sites():
        print("no sites yet: tally site add example.com --domains example.com,www.example.com")
    else:
        print(f"{'SITE':<32}  {'FROM':<8}  {'SALT':<6}  DOMAINS")
    for site in registry.sites():
        origin = "conf" if registry.origin(site.site_id) == "seed" else "runtime"
        print(f"{site.site_id:<32}  {origin:<8}  {site.salt_period:<6}  {','.join(site.domains) or '(any host)'}")
    removed = registry.removed()
    if removed:
        print(f"\nremoved (events refused; stored data kept): {', '.join(removed)}")
    return 0


def run_remove(args: argparse.Namespace, settings: Settings) -> int:
    site = remove_site(settings, args.site_id)
    print(
        f"removed site {site.site_id}: ingest refuses its events within seconds. Its stored events stay in "
        f"raw.pageviews and the views; add it again with tally site add {site.site_id} --domains …"
    )
    return 0
