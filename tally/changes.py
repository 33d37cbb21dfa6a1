"""The settings' audit trail: who changed which setting of which site, when, and how.

Every change to a site, a dashboard user, an API key or a share link, made on the command line,
through the Stats API's admin endpoint or on the dashboard, appends one line to
``<home>/audit/changes.jsonl`` (0600): a JSON object, never rewritten or removed. Readers are
``tally changes`` and the dashboard (users granted every site). A change's text never holds a
secret: no password, key or token, only their ids.

The lines are appended under the folder's lock and flushed to disk before the command says it is
done; a line that does not parse (a disk that filled mid-line) is skipped by readers and counted.
"""

from __future__ import annotations

import datetime as dt
import getpass
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from tally.private_files import folder_lock
from tally.settings import Settings, SiteSettings
from tally.site_registry import site_json

EVERY_SITE = "*"  # a change that is not one site's (a user granted every site, an admin key)
COMMAND_LINE, API, DASHBOARD = "command line", "api", "dashboard"  # how a change was made
MAX_DETAIL = 500  # characters of a change's text


@dataclass(frozen=True)
class Change:
    """One change: when (UTC, ISO 8601), who (a user, an API key, an operating-system user), how
    (``command line``, ``api``, ``dashboard``), the site (or ``*``), what and the action, in words."""

    at: str
    actor: str
    via: str
    site_id: str
    subject: str  # site, user, api key, share link
    action: str  # add, change, remove, create, revoke
    detail: str = ""


def folder(settings: Settings) -> Path:
    return settings.home_dir / "audit"


def command_line_actor() -> str:
    """Who runs a ``tally`` command: the operating-system user."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for the uid (a container)
        return f"uid {os.getuid()}"


def record_change(
    settings: Settings,
    *,
    actor: str,
    via: str,
    site_id: str,
    subject: str,
    action: str,
    detail: str = "",
    now: dt.datetime | None = None,
) -> Change:
    """Append one change to the trail (flushed to disk before returning)."""
    at = (now or dt.datetime.now(dt.UTC)).isoformat(timespec="seconds")
    change = Change(at, actor[:200], via, site_id, subject, action, " ".join(detail.split())[:MAX_DETAIL])
    line = json.dumps(asdict(change), ensure_ascii=False, sort_keys=True) + "\n"
    where = folder(settings)
    with folder_lock(where):
        fd = os.open(where / "changes.jsonl", os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":  # a torn last line: this one starts its own
                line = "\n" + line
            os.write(fd, line.encode())
            os.fsync(fd)
        finally:
            os.close(fd)
    return change


def load_changes(settings: Settings, *, site_ids: tuple[str, ...] | None = None) -> list[Change]:
    """Every change, oldest first (of ``site_ids`` and instance-wide ones only, when given)."""
    return [c for c in _read(settings) if site_ids is None or c.site_id in site_ids or c.site_id == EVERY_SITE]


def _read(settings: Settings) -> Iterator[Change]:
    path = folder(settings) / "changes.jsonl"
    if not path.exists():
        return
    with path.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            try:
                yield Change(**json.loads(line))
            except (ValueError, TypeError):
                continue  # a torn line: skipped, never a crash


def record_site_change(
    settings: Settings, *, actor: str, via: str, before: SiteSettings | None, after: SiteSettings | None
) -> Change:
    """A site added (``before`` None), changed or removed (``after`` None), with what changed."""
    site = after or before
    assert site is not None, "a change has a site before or after it"
    if before is None or after is None:
        action = "add" if before is None else "remove"
        shown = site_json(site)
        detail = "; ".join(f"{k}: {_shown(v)}" for k, v in shown.items() if k != "site_id" and v not in ([], "", 0))
    else:
        action = "change"
        old, new = site_json(before), site_json(after)
        detail = "; ".join(f"{k}: {_shown(old[k])} → {_shown(new[k])}" for k in new if old.get(k) != new[k])
        detail = detail or "written again, unchanged"
    return record_change(
        settings, actor=actor, via=via, site_id=site.site_id, subject="site", action=action, detail=detail
    )


def _shown(value: object) -> str:
    return ",".join(map(str, value)) if isinstance(value, list) else str(value)


def record_for_sites(
    settings: Settings, sites: tuple[str, ...], *, actor: str, via: str, subject: str, action: str, detail: str
) -> None:
    """One change for each site it concerns (a user's or a key's grants; ``*``: every site)."""
    for site_id in sites or (EVERY_SITE,):
        record_change(settings, actor=actor, via=via, site_id=site_id, subject=subject, action=action, detail=detail)
