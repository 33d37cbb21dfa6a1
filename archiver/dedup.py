"""Which event_ids raw.pageviews already holds, for the last few event dates.

Duplicates reach Kafka when a browser retries, or when ingest replays its spool after a
broker outage for an event Kafka had in fact stored. The archiver drops an event whose id it
has seen. Memory stays small: each id is kept as its first 64 bits in a sorted numpy array
per event date (8 bytes an id), with a small set for the newest ids. Two distinct random
UUIDs share 64 bits with probability ~n²/2⁶⁵ (about 3·10⁻⁷ for 3.5M ids a day). Dates older
than the horizon are forgotten; a duplicate arriving later than that is left to the views'
own event_id deduplication and is reported by the audit.
"""

from __future__ import annotations

import datetime as dt
import hashlib

import numpy as np
import pyarrow.compute as pc
from deltalake import DeltaTable

MERGE_EVERY = 50_000


def id_key(event_id: str) -> int:
    """The first 64 bits of a UUID string, as a signed int64 (what the arrays hold).

    An id that is not hex (a producer other than ingest) is hashed instead of crashing the
    archiver on every restart.
    """
    try:
        value = int(event_id.replace("-", "")[:16], 16)
    except ValueError:
        value = int.from_bytes(hashlib.blake2b(event_id.encode(), digest_size=8).digest(), "big")
    return value - (1 << 64) if value >= (1 << 63) else value


class SeenIds:
    def __init__(self, horizon_days: int) -> None:
        self.horizon_days = horizon_days
        self._base: dict[dt.date, np.ndarray] = {}
        self._recent: dict[dt.date, set[int]] = {}

    def load(self, table: DeltaTable | None, today: dt.date) -> int:
        """Fill from the raw table's recent partitions (None: not written yet); return how many ids were loaded."""
        if table is None:
            return 0
        since = today - dt.timedelta(days=self.horizon_days)
        data = table.to_pyarrow_dataset().to_table(
            columns=["event_id", "event_date"], filter=pc.field("event_date") >= since
        )
        loaded = 0
        for date in set(data.column("event_date").to_pylist()):
            ids = data.filter(pc.equal(data.column("event_date"), date)).column("event_id").to_pylist()
            self._base[date] = np.unique(np.array([id_key(i) for i in ids], dtype=np.int64))
            loaded += len(ids)
        return loaded

    def seen(self, event_id: str, date: dt.date) -> bool:
        key = id_key(event_id)
        if key in self._recent.get(date, ()):
            return True
        base = self._base.get(date)
        if base is None or not len(base):
            return False
        i = int(np.searchsorted(base, key))
        return i < len(base) and int(base[i]) == key

    def add(self, event_id: str, date: dt.date) -> None:
        recent = self._recent.setdefault(date, set())
        recent.add(id_key(event_id))
        if len(recent) >= MERGE_EVERY:
            self._merge(date)

    def _merge(self, date: dt.date) -> None:
        fresh = np.fromiter(self._recent.pop(date, set()), dtype=np.int64)
        self._base[date] = np.union1d(self._base.get(date, np.empty(0, dtype=np.int64)), fresh)

    def forget_before(self, today: dt.date) -> None:
        """Drop dates older than the horizon (bounded memory on a long-running archiver)."""
        cutoff = today - dt.timedelta(days=self.horizon_days)
        for store in (self._base, self._recent):
            for date in [d for d in store if d < cutoff]:
                del store[date]
