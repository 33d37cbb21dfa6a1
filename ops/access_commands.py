"""The ``tally user`` and ``tally share`` commands, and the first-run admin and login line of ``tally up``.

Users added here are stored (scrypt hash only) in ``<home>/dashboard/users.yaml``; users of
``dashboard.users`` in the config are listed but edited in the config. Nothing secret is printed
except a share link, which is what ``share create`` is for.
"""

from __future__ import annotations

import argparse
import getpass
import logging
import secrets
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dashboard.auth import (
    ADMIN,
    EVERY_SITE,
    USER_NAME,
    admin_password_path,
    load_users,
    read_file_users,
    state_lock,
    write_file_users,
)
from dashboard.passwords import hash_password, verify_password
from dashboard.sessions import end_user_sessions
from dashboard.share_links import ShareLinks, describe_view, parse_view, record_share_link, share_url
from ops.actions import Handler, actions
from ops.site_commands import with_sites_named
from tally.changes import COMMAND_LINE, command_line_actor, record_change, record_for_sites
from tally.private_files import write_private
from tally.settings import DashboardUser, Settings

log = logging.getLogger("tally.ops.access_commands")

EXIT_OK, EXIT_NOT_FOUND, EXIT_USAGE = 0, 1, 2
MIN_PASSWORD_CHARS = 8


def _fail(message: str, code: int = EXIT_USAGE) -> int:
    print(message, file=sys.stderr)
    return code


def add_user_arguments(parser: argparse.ArgumentParser) -> None:
    """``tally user add|list|remove|hash``."""
    action = actions(parser, "user_action")
    add = action("add", run_user_add, "Add a dashboard user (password asked twice, or read from stdin).")
    add.add_argument("name", help="login name: letters, digits and _ . @ - (at most 64)")
    add.add_argument("--sites", required=True, help="site ids the user may see, comma-separated, or * for every site")
    add.add_argument("--email", default="", help="e-mail the identity provider reports (with dashboard.oidc)")
    add.add_argument("--password-stdin", action="store_true", help="read the password from the first line of stdin")
    add.add_argument("--replace", action="store_true", help="replace an existing user's password, sites and e-mail")
    action("list", run_user_list, "List dashboard users, their sites and where they are defined (no hashes).")
    remove = action("remove", run_user_remove, "Remove a dashboard user added with `tally user add`.")
    remove.add_argument("name")
    hashed = action("hash", run_user_hash, "Print the scrypt hash of a password, for a user in conf (dashboard.users).")
    hashed.add_argument("--password-stdin", action="store_true", help="read the password from the first line of stdin")


def run_user(args: argparse.Namespace, settings: Settings) -> int:
    """Dispatch ``tally user <action>``."""
    handler: Handler = args.action
    return handler(args, settings)


def _read_password(args: argparse.Namespace, name: str) -> str | None:
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass(f"Password for {name}: ")
        if getpass.getpass("Same password again: ") != password:
            print("the two passwords differ; nothing changed", file=sys.stderr)
            return None
    if len(password) < MIN_PASSWORD_CHARS:
        print(f"a password needs at least {MIN_PASSWORD_CHARS} characters; nothing changed", file=sys.stderr)
        return None
    return password


def _sites(text: str, settings: Settings) -> tuple[str, ...] | str:
    """The granted sites, or the error message."""
    sites = tuple(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    if sites == (EVERY_SITE,):
        return sites
    settings = with_sites_named(settings, sites)  # a site added at runtime (tally site add) may be granted too
    known = [s.site_id for s in settings.sites]
    unknown = [s for s in sites if s not in known]
    if not sites or unknown:
        return f"--sites: {', '.join(unknown) or 'nothing given'} is not a configured site; use * or some of: " + (
            ", ".join(known) or "(no sites configured: add them under sites: in conf/tally.yaml)"
        )
    return sites


def run_user_add(args: argparse.Namespace, settings: Settings) -> int:
    """Add (or with --replace, update) a user in users.yaml."""
    if not USER_NAME.fullmatch(args.name):
        return _fail(f"user name {args.name!r}: use letters, digits and _ . @ - (at most 64, starting alphanumeric)")
    if any(u.name == args.name for u in settings.dashboard.users):
        return _fail(f"user {args.name!r} is defined in the config (dashboard.users); change it there")
    sites = _sites(args.sites, settings)
    if isinstance(sites, str):
        return _fail(sites)
    if any(u.name == args.name for u in read_file_users(settings)) and not args.replace:
        return _fail(f"user {args.name!r} exists; add --replace to change their password and sites")
    password = _read_password(args, args.name)
    if password is None:
        return EXIT_USAGE
    user = DashboardUser(args.name, hash_password(password, n=settings.dashboard.password_scrypt_n), sites, args.email)
    with state_lock(settings):
        others = [u for u in read_file_users(settings) if u.name != args.name]
        write_file_users(settings, [*others, user])
        if args.name == ADMIN:  # the first-run password no longer works: do not keep it around
            admin_password_path(settings).unlink(missing_ok=True)
    ended = end_user_sessions(settings, args.name)  # a new password (or new sites): log in again
    record_for_sites(
        settings,
        sites,
        actor=command_line_actor(),
        via=COMMAND_LINE,
        subject="user",
        action="change" if args.replace else "add",
        detail=f"{args.name}: sites {','.join(sites)}" + (f", e-mail {args.email}" if args.email else ""),
    )
    print(f"user {args.name} saved; sites: {', '.join(sites)}" + (f"; {ended} open session(s) ended" if ended else ""))
    return EXIT_OK


def run_user_list(args: argparse.Namespace, settings: Settings) -> int:
    """One line per user: name, sites, e-mail, where defined."""
    users = load_users(settings)
    if not users:
        print("no dashboard users yet: `tally up` creates admin, or add one with `tally user add NAME --sites …`")
        return EXIT_OK
    in_config = {u.name for u in settings.dashboard.users}
    print(f"{'USER':<24} {'SITES':<40} {'E-MAIL':<28} DEFINED IN")
    for user in users.values():
        where = "config (dashboard.users)" if user.name in in_config else "users.yaml (tally user)"
        print(f"{user.name:<24} {','.join(user.sites) or '-':<40} {user.email or '-':<28} {where}")
    return EXIT_OK


def run_user_remove(args: argparse.Namespace, settings: Settings) -> int:
    """Remove a users.yaml user and end their open sessions (every tab is out at its next page run)."""
    if any(u.name == args.name for u in settings.dashboard.users):
        return _fail(f"user {args.name!r} is defined in the config (dashboard.users); remove it there")
    with state_lock(settings):
        users = read_file_users(settings)
        if not any(u.name == args.name for u in users):
            return _fail(f"no user {args.name!r} in users.yaml (see `tally user list`)", EXIT_NOT_FOUND)
        write_file_users(settings, [u for u in users if u.name != args.name])
        if args.name == ADMIN:
            admin_password_path(settings).unlink(missing_ok=True)
    removed = next(u for u in users if u.name == args.name)
    record_for_sites(
        settings,
        removed.sites,
        actor=command_line_actor(),
        via=COMMAND_LINE,
        subject="user",
        action="remove",
        detail=f"{args.name} (had sites {','.join(removed.sites)})",
    )
    ended = end_user_sessions(settings, args.name)
    print(f"user {args.name} removed" + (f"; {ended} open session(s) ended" if ended else ""))
    now = time.time()
    made = [link for link in ShareLinks(settings).all() if link.creator == args.name and link.status(now) == "active"]
    if made:
        print(f"{len(made)} share link(s) made by {args.name} no longer open (they lent {args.name}'s access)")
    return EXIT_OK


def run_user_hash(args: argparse.Namespace, settings: Settings) -> int:
    """Print a password hash to paste into ``dashboard.users[].password_hash``."""
    password = _read_password(args, "the config user")
    if password is None:
        return EXIT_USAGE
    print(hash_password(password, n=settings.dashboard.password_scrypt_n))
    return EXIT_OK


def add_share_arguments(parser: argparse.ArgumentParser) -> None:
    """``tally share create|list|revoke``."""
    action = actions(parser, "share_action")
    create = action("create", run_share_create, "Make a signed, expiring, read-only link to one site's view.")
    create.add_argument("--site", required=True, help="the configured site_id the link shows")
    create.add_argument("--view", default="", help='the view\'s query parameters, e.g. "range=30d&country=DE"')
    create.add_argument("--days", type=float, help="lifetime in days (default: dashboard.share_link_days)")
    create.add_argument("--base-url", help="the dashboard's public address (default: the configured host and port)")
    create.add_argument(
        "--creator",
        default=ADMIN,
        help="the dashboard user whose access the link lends; it stops working when that user is removed or "
        f"loses the site (default: {ADMIN})",
    )
    action("list", run_share_list, "List issued share links: id, site, view, creator, expiry, state (no tokens).")
    revoke = action("revoke", run_share_revoke, "Revoke a share link: it stops opening at once.")
    revoke.add_argument("link_id", metavar="ID", help="the link's id, from `tally share list`")


def run_share(args: argparse.Namespace, settings: Settings) -> int:
    """Dispatch ``tally share <action>``."""
    handler: Handler = args.action
    return handler(args, settings)


def run_share_create(args: argparse.Namespace, settings: Settings) -> int:
    """Record a link and print it (last line: the URL alone)."""
    from ops.stack import dashboard_url

    settings = with_sites_named(settings, (args.site,))  # a site added at runtime may be shared too
    try:
        view = parse_view(args.view, site=args.site)
        link, token = ShareLinks(settings).create(
            site=args.site,
            view=view,
            days=args.days if args.days is not None else settings.dashboard.share_link_days,
            creator=args.creator,
            now=time.time(),
        )
    except ValueError as e:
        return _fail(f"tally share create: {e}")
    expires = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(link.expires_at))
    record_share_link(settings, link, actor=command_line_actor(), via=COMMAND_LINE)
    print(f"share link {link.link_id}: {link.site}, {describe_view(link.view)}, read-only, expires {expires}")
    print(f"revoke it with: tally share revoke {link.link_id}")
    print(share_url(args.base_url or dashboard_url(settings), token))
    return EXIT_OK


def run_share_list(args: argparse.Namespace, settings: Settings) -> int:
    links = ShareLinks(settings).all()
    if not links:
        print("no share links yet (tally share create --site S)")
        return EXIT_OK
    now = time.time()
    print(f"{'ID':<11} {'STATE':<8} {'SITE':<24} {'EXPIRES (UTC)':<17} {'CREATOR':<16} VIEW")
    for link in links:
        expires = time.strftime("%Y-%m-%d %H:%M", time.gmtime(link.expires_at))
        print(
            f"{link.link_id:<11} {link.status(now):<8} {link.site:<24} {expires:<17} {link.creator:<16} "
            f"{describe_view(link.view)}"
        )
    return EXIT_OK


def run_share_revoke(args: argparse.Namespace, settings: Settings) -> int:
    revoked = ShareLinks(settings).revoke(args.link_id, now=time.time())
    if revoked is None:
        return _fail(f"no share link {args.link_id!r} (see `tally share list`)", EXIT_NOT_FOUND)
    record_change(
        settings,
        actor=command_line_actor(),
        via=COMMAND_LINE,
        site_id=revoked.site,
        subject="share link",
        action="revoke",
        detail=f"link {revoked.link_id} (made by {revoked.creator})",
    )
    print(f"share link {revoked.link_id} ({revoked.site}) revoked")
    return EXIT_OK


@dataclass(frozen=True)
class AdminLogin:
    name: str
    password: str
    path: Path  # the 0600 file holding the password


def ensure_admin(settings: Settings) -> AdminLogin | None:
    """When no user exists at all, create ``admin`` (every site) with a random password; None otherwise.

    Only the hash goes to ``users.yaml``; the password is written to ``<home>/dashboard/admin-password``
    (0600) so the operator can read it once and then change it with ``tally user add admin --replace``.
    """
    with state_lock(settings):
        if load_users(settings):
            return None
        password = secrets.token_urlsafe(18)
        admin = DashboardUser(ADMIN, hash_password(password, n=settings.dashboard.password_scrypt_n), (EVERY_SITE,))
        write_file_users(settings, [admin])
        write_private(admin_password_path(settings), password + "\n")
    log.info("dashboard admin created", extra={"fields": {"password_file": str(admin_password_path(settings))}})
    return AdminLogin(ADMIN, password, admin_password_path(settings))


def saved_admin_login(settings: Settings) -> AdminLogin | None:
    """The first-run admin login if its saved password still works (not changed or removed since)."""
    path = admin_password_path(settings)
    admin = load_users(settings).get(ADMIN)
    if admin is None or not path.exists():
        return None
    password = path.read_text().strip()
    return AdminLogin(ADMIN, password, path) if verify_password(password, admin.password_hash) else None


def dashboard_login_line(settings: Settings) -> str:
    """For ``tally up``: creates the first-run admin if there is no user, and says how to log in."""
    login = ensure_admin(settings) or saved_admin_login(settings)
    if login is None:
        return "dashboard login: a user of `tally user list` (add one with `tally user add NAME --sites …`)"
    return f"dashboard login: {login.name} / {login.password} (saved in {login.path})"
