"""The prepared scans a process keeps (:class:`query.scans.PreparedScan`): at most two ranges (a
page's and its comparison period's), two table versions each, a layer also holding the read scan
it lies over; each scan built once even when several questions ask for it together, from the
range's newest older scan when the table only grew since."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import NamedTuple

import pyarrow.dataset as ds

from query.aggregates import Range
from query.raw_events import Interval
from query.scans import PreparedScan
from tally.log import kv

log = logging.getLogger("tally.query.scans")

PREPARED_RANGES = 2  # ranges kept per process: a page's range and its comparison period
# Versions of a range kept: a page run still asking about the version before the newest one
# finds its scan (questions are keyed on the version their page run read).
VERSIONS_KEPT = 2


class ScanKey(NamedTuple):
    """A range's scans: one site's events of a table between two dates (and inside a UTC interval)."""

    table: str
    site_id: str
    start: object
    end: object
    interval: Interval
    gap_ms: int


class PreparedScans:
    """The :class:`PreparedScan` of each recent range (at most ``size``), at a few table versions each."""

    def __init__(self, size: int = PREPARED_RANGES) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._ranges: OrderedDict[ScanKey, OrderedDict[int, PreparedScan]] = OrderedDict()
        # One build at a time per range, whatever the version: a range's lock lives as long as the range.
        self._building: dict[ScanKey, threading.Lock] = {}

    def kept(self) -> dict[ScanKey, list[int]]:
        """The versions kept of each range, least recently used first."""
        with self._lock:
            return {key: list(versions) for key, versions in self._ranges.items()}

    def get(self, key: ScanKey, version: int, build: Callable[[PreparedScan | None], PreparedScan]) -> PreparedScan:
        """The range's scan of ``version``, or ``build(base)``'s (kept; the least recently used range
        dropped), ``base`` being the range's newest scan of an older version, if any."""
        with self._lock:
            if (found := self._kept(key, version)) is not None:
                return found
            building = self._building.setdefault(key, threading.Lock())
        dropped: list[object] = []  # let go of outside the lock: a scan's finalizer detaches its database
        with building:
            with self._lock:
                if (found := self._kept(key, version)) is not None:
                    return found
                older = [v for v in self._ranges.get(key, {}) if v < version]
                base = self._ranges[key][max(older)] if older else None
            try:
                scan = build(base)
            except BaseException:  # tried again by the next question
                with self._lock:
                    if key not in self._ranges:  # no range to keep the lock for
                        self._building.pop(key, None)
                raise
            with self._lock:  # kept before the build's lock is let go: nobody builds it twice
                versions = self._ranges.setdefault(key, OrderedDict())
                self._ranges.move_to_end(key)
                versions[version] = scan
                while len(versions) > VERSIONS_KEPT:
                    dropped.append(versions.popitem(last=False))
                while len(self._ranges) > self.size:
                    # dropped, not closed: a question still reading a scan holds it, and its
                    # database is detached with the last reference
                    old, scans = self._ranges.popitem(last=False)
                    self._building.pop(old, None)
                    dropped.append(scans)
        dropped.clear()
        return scan

    def _kept(self, key: ScanKey, version: int) -> PreparedScan | None:
        versions = self._ranges.get(key)
        if versions is None or version not in versions:
            return None
        self._ranges.move_to_end(key)
        versions.move_to_end(version)
        return versions[version]


SCANS = PreparedScans()  # this process's scans (the dashboard's drill-downs)


def prepared_scan(
    raw: ds.Dataset, snapshot: tuple[str, int], site_id: str, days: Range, interval: Interval, gap_ms: int
) -> PreparedScan:
    """The :class:`PreparedScan` of a table version's events of a site and range (built once, then kept)."""
    table, version = snapshot

    def build(base: PreparedScan | None) -> PreparedScan:
        began = time.perf_counter()
        scan = None
        if base is not None:
            try:
                scan = base.extended(raw, site_id, days, interval, gap_ms, version=version)
            except Exception:
                log.warning("extending a prepared scan failed; reading the range", exc_info=True)
        how = "extended" if scan is not None else "read"
        if scan is None:
            scan = PreparedScan.read(raw, site_id, days, interval, gap_ms, version=version)
        seconds = round(time.perf_counter() - began, 2)
        fields = kv(how=how, site=site_id, start=str(days.start), end=str(days.end), version=version, seconds=seconds)
        log.info("prepared scan", extra=fields)
        return scan

    return SCANS.get(ScanKey(table, site_id, days.start, days.end, interval, gap_ms), version, build)
