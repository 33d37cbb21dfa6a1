"""Sites at runtime: the records of the compacted ``kafka.sites_topic`` folded over the seed.

``conf/tally.yaml``'s ``sites:`` are the seed: a site listed there and never named on the topic
is configured. A record on the topic (key: the site_id) overrides the seed or an earlier record:

- ``{"v": 1, "site": {<every SiteSettings field>}, "at": <epoch ms>}``: the site, added or changed;
- ``{"v": 1, "removed": true, "at": <epoch ms>}``: the site is removed (ingest refuses its events
  as an unknown site's; its stored events stay until ``tally forget``).

A removal is a record, not a null tombstone: compaction drops a tombstone after
``delete.retention.ms``, and then the seed would bring the site back. The last record of each
key survives compaction, which is all the fold needs.

This module is pure (no Kafka): encoding, decoding, validation through
:func:`tally.settings.site_settings`, the fold and :class:`SiteRegistry`, the current sites of a
process. Each app that needs the sites follows the topic itself and feeds the registry.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tally.log import kv
from tally.settings import SettingsError, SiteSettings, site_settings

log = logging.getLogger("tally.sites")

RECORD_VERSION = 1
SITE_ID_FORMAT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,252}")
DOMAIN_FORMAT = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*")


class SiteRecordError(ValueError):
    """A record on the sites topic that is not a site nor a removal: the message says why."""


@dataclass(frozen=True)
class SiteChange:
    """One decoded record: the site as it now is, or ``site=None`` when it was removed."""

    site_id: str
    site: SiteSettings | None
    at_ms: int = 0


def check_site_id(site_id: str) -> None:
    """Refuse a site id a new site may not have (:class:`SettingsError` says what to write)."""
    if not SITE_ID_FORMAT.fullmatch(site_id):
        raise SettingsError(
            f"site_id {site_id!r}: use letters, digits and . _ : - (at most 253), starting with a letter "
            "or digit, e.g. example.com"
        )


def new_site(values: Mapping[str, Any]) -> SiteSettings:
    """A site to add or change at runtime (``tally site add``, the API's admin endpoint), checked as
    the file's sites are, plus its id and domains; :class:`SettingsError` says what to fix."""
    site_id = values.get("site_id")
    check_site_id(site_id if isinstance(site_id, str) else repr(site_id))
    site = site_settings(values, key=f"site {site_id}")
    for domain in site.domains:
        if not DOMAIN_FORMAT.fullmatch(domain):
            raise SettingsError(
                f"site {site_id}.domains: {domain!r} is not a host name; list hosts only, "
                "e.g. example.com,www.example.com (no scheme, path or port)"
            )
    return dataclasses.replace(site, domains=tuple(dict.fromkeys(d.lower() for d in site.domains)))


def site_json(site: SiteSettings) -> dict[str, Any]:
    """Every field of a site as JSON values (tuples as lists)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(site).items()}


def encode_site(site: SiteSettings, *, at_ms: int) -> bytes:
    """The record that adds or changes a site."""
    return json.dumps({"v": RECORD_VERSION, "site": site_json(site), "at": at_ms}, sort_keys=True).encode()


def encode_removal(*, at_ms: int) -> bytes:
    """The record that removes a site (not a null tombstone: see the module's docstring)."""
    return json.dumps({"v": RECORD_VERSION, "removed": True, "at": at_ms}).encode()


def decode_record(key: bytes | None, value: bytes | None) -> SiteChange:
    """A record of the sites topic as a :class:`SiteChange`; :class:`SiteRecordError` if it is neither
    a valid site (with the key as its site_id) nor a removal."""
    if not key:
        raise SiteRecordError("the record has no key; a site record's key is its site_id")
    try:
        site_id = key.decode()
    except UnicodeDecodeError as e:
        raise SiteRecordError("the key is not UTF-8 text") from e
    if not value:
        raise SiteRecordError(f"site {site_id!r}: a null record; removals are {{'removed': true}} records")
    try:
        record = json.loads(value)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise SiteRecordError(f"site {site_id!r}: the value is not JSON ({e})") from e
    if not isinstance(record, dict) or record.get("v") != RECORD_VERSION:
        raise SiteRecordError(f"site {site_id!r}: not a version-{RECORD_VERSION} site record")
    at_ms = record.get("at", 0)
    at_ms = at_ms if isinstance(at_ms, int) and not isinstance(at_ms, bool) else 0
    if record.get("removed") is True:
        return SiteChange(site_id, None, at_ms)
    fields = record.get("site")
    if not isinstance(fields, Mapping):
        raise SiteRecordError(f"site {site_id!r}: the record holds neither 'site' nor 'removed': true")
    try:
        site = site_settings(fields, key=f"sites topic ({site_id})")
    except SettingsError as e:
        raise SiteRecordError(str(e)) from e
    if site.site_id != site_id:
        raise SiteRecordError(f"site {site_id!r}: the record's site_id is {site.site_id!r}, not its key")
    return SiteChange(site_id, site, at_ms)


def fold(seed: Sequence[SiteSettings], changes: Iterable[SiteChange]) -> tuple[SiteSettings, ...]:
    """The current sites: the seed, then each change in order (the last one per site wins).

    Seed sites keep their order; sites first added at runtime follow, in the order they were added.
    """
    current: dict[str, SiteSettings | None] = {s.site_id: s for s in seed}
    for change in changes:
        current[change.site_id] = change.site
    return tuple(s for s in current.values() if s is not None)


class SiteRegistry:
    """The current sites of one process: the seed, and every record read so far from the topic.

    One thread (the app's follower) applies records; request handlers read. Each change builds a
    new lookup and swaps it in whole, so a reader never sees half a change and takes no lock.
    """

    def __init__(self, *, seed: Sequence[SiteSettings]) -> None:
        self.seed = tuple(seed)
        self._changes: dict[str, SiteChange] = {}
        self._lock = threading.Lock()  # between appliers only (a follower and a process's own writes)
        self._by_id: dict[str, SiteSettings] = {s.site_id: s for s in self.seed}
        self._sites: tuple[SiteSettings, ...] = self.seed
        self.generation = 0  # grows with each applied change: caches keyed on it know when to rebuild

    def get(self, site_id: str) -> SiteSettings | None:
        """The configured site with this id now, or None (unknown, or removed)."""
        return self._by_id.get(site_id)

    def sites(self) -> tuple[SiteSettings, ...]:
        """Every configured site now: the seed's (changed or not, removed ones left out), then runtime ones."""
        return self._sites

    def origin(self, site_id: str) -> str:
        """Where a site's current settings come from: ``runtime`` (the topic), ``seed`` (conf/), or ""."""
        if site_id in self._changes:
            return "runtime" if self._changes[site_id].site is not None else ""
        return "seed" if any(s.site_id == site_id for s in self.seed) else ""

    def removed(self) -> tuple[str, ...]:
        """The ids of sites removed at runtime (their events stay stored until ``tally forget``)."""
        return tuple(sorted(k for k, c in self._changes.items() if c.site is None))

    def apply(self, key: bytes | None, value: bytes | None) -> SiteChange | None:
        """Apply one record of the topic; a bad one is logged and skipped (None), never raised."""
        try:
            change = decode_record(key, value)
        except (ValueError, TypeError) as e:  # SiteRecordError, or anything a stranger record could raise
            log.warning("bad site record ignored", extra=kv(error=str(e)))
            return None
        self.apply_change(change)
        return change

    def apply_change(self, change: SiteChange) -> None:
        """Apply one decoded change and swap in the new lookup."""
        with self._lock:
            if self._changes.get(change.site_id) == change:
                return  # a replay of the record in force: nothing changes
            self._changes[change.site_id] = change
            sites = fold(self.seed, self._changes.values())
            self._by_id, self._sites = {s.site_id: s for s in sites}, sites
            self.generation += 1
        log.info(
            "site removed" if change.site is None else "site configured",
            extra=kv(site=change.site_id, sites=len(sites)),
        )
