"""Which event_ids raw.pageviews already holds, for the last few event dates.

Duplicates reach Kafka when a browser retries, or when ingest replays its spool after a
broker outage for an event Kafka had in fact stored. The archiver drops an event whose id it
has seen. Memory stays small: each id is kept as its first 64 bits in a sorted numpy array
per event date (8 bytes an id), with a smaller sorted array for the newest ids so that a
batch does not copy the whole day. Two distinct random UUIDs share 64 bits with probability
~n²/2⁶⁵ (about 3·10⁻⁷ for 3.5M ids a day). Dates older than the horizon are forgotten; a
duplicate arriving later than that is left to the views' own event_id deduplication and is
reported by the audit.

Everything works on whole batches (numpy), never id by id: at tens of thousands of events a
second, a Python call per event is the archiver's main cost.
"""

from __future__ import annotations

import datetime as dt
import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

MERGE_EVERY = 200_000  # newest ids per date kept apart until there are this many
EPOCH = dt.date(1970, 1, 1)

# Where the first 16 hex digits of a canonical UUID string sit (after removing its dashes).
_UUID_DIGITS = np.array([*range(0, 8), *range(9, 13), *range(14, 18)])
_SHIFTS = np.arange(60, -4, -4, dtype=np.uint64)
_HEX_VALUE = np.full(256, -1, dtype=np.int8)
for _digit in b"0123456789":
    _HEX_VALUE[_digit] = _digit - ord("0")
for _digit in b"abcdef":
    _HEX_VALUE[_digit] = _HEX_VALUE[_digit - 32] = _digit - ord("a") + 10


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


def id_keys(event_ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """:func:`id_key` of every id of a string column at once, as an int64 array.

    Canonical UUIDs (``xxxxxxxx-xxxx-xxxx-…``, the only ids ingest writes) are read straight
    from the column's bytes; any other id goes through :func:`id_key`, so both agree always.
    """
    ids = event_ids.combine_chunks() if isinstance(event_ids, pa.ChunkedArray) else event_ids
    ids = ids.cast(pa.string())
    assert not ids.null_count, "event_id is required; a null one must not reach deduplication"
    n = len(ids)
    keys = np.zeros(n, dtype=np.int64)
    if not n:
        return keys
    _, offsets_buffer, data_buffer = ids.buffers()
    assert offsets_buffer is not None, "a string array always has offsets"
    offsets = np.frombuffer(offsets_buffer, dtype=np.int32)[ids.offset : ids.offset + n + 1]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
    starts, lengths = offsets[:-1].astype(np.int64), np.diff(offsets)
    canonical = lengths >= 18
    at = np.flatnonzero(canonical)
    if len(at):
        first = starts[at]
        digits = _HEX_VALUE[data[first[:, None] + _UUID_DIGITS]]
        dashes = (data[first + 8] == ord("-")) & (data[first + 13] == ord("-"))
        canonical[at] = dashes & (digits >= 0).all(axis=1)
        values = (np.maximum(digits, 0).astype(np.uint64) << _SHIFTS).sum(axis=1, dtype=np.uint64)
        keys[at] = values.view(np.int64)
    for i in np.flatnonzero(~canonical):
        keys[i] = id_key(ids[int(i)].as_py())
    return keys


def day_numbers(dates: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A date32 column as days since 1970-01-01 (int32)."""
    return np.asarray(pc.cast(dates, pa.int32()).to_numpy(zero_copy_only=False), dtype=np.int32)


def _insert(into: np.ndarray, fresh: np.ndarray) -> np.ndarray:
    """Sorted ``into`` with the sorted ``fresh`` ids (none of them in it yet) merged in."""
    return np.insert(into, np.searchsorted(into, fresh), fresh)


def _contains(sorted_ids: np.ndarray, keys: np.ndarray) -> np.ndarray:
    if not len(sorted_ids):
        return np.zeros(len(keys), dtype=bool)
    i = np.minimum(np.searchsorted(sorted_ids, keys), len(sorted_ids) - 1)
    return np.asarray(sorted_ids[i] == keys)


class SeenIds:
    """The event_ids archived per event date within the horizon, as sorted 64-bit keys."""

    def __init__(self, horizon_days: int) -> None:
        self.horizon_days = horizon_days
        self._base: dict[dt.date, np.ndarray] = {}
        self._recent: dict[dt.date, np.ndarray] = {}

    def load(self, table: DeltaTable | None, today: dt.date) -> int:
        """Fill from the raw table's recent partitions (None: not written yet); return how many ids were loaded."""
        if table is None:
            return 0
        since = today - dt.timedelta(days=self.horizon_days)
        data = table.to_pyarrow_dataset().to_table(
            columns=["event_id", "event_date"], filter=pc.field("event_date") >= since
        )
        keys, days = id_keys(data.column("event_id")), day_numbers(data.column("event_date"))
        for day in np.unique(days):
            self._base[EPOCH + dt.timedelta(days=int(day))] = np.unique(keys[days == day])
        return int(data.num_rows)

    def admit(self, keys: np.ndarray, days: np.ndarray) -> np.ndarray:
        """Which events are new: their (date, id) is neither remembered nor taken by an earlier
        event of the same batch. The new ones are remembered. ``keys`` from :func:`id_keys`,
        ``days`` from :func:`day_numbers`; returns a boolean mask over the batch."""
        assert len(keys) == len(days), "one date per id"
        new = np.zeros(len(keys), dtype=bool)
        for day in np.unique(days):
            at = np.flatnonzero(days == day)
            date = EPOCH + dt.timedelta(days=int(day))
            unique, first = np.unique(keys[at], return_index=True)  # sorted; first copy in the batch wins
            unseen = ~(self._contains(date, unique))
            new[at[first[unseen]]] = True
            self._add(date, unique[unseen])
        return new

    def _contains(self, date: dt.date, keys: np.ndarray) -> np.ndarray:
        empty = np.empty(0, dtype=np.int64)
        return np.asarray(_contains(self._base.get(date, empty), keys) | _contains(self._recent.get(date, empty), keys))

    def _add(self, date: dt.date, fresh: np.ndarray) -> None:
        recent = _insert(self._recent.get(date, np.empty(0, dtype=np.int64)), fresh)
        if len(recent) >= MERGE_EVERY:
            self._base[date] = _insert(self._base.get(date, np.empty(0, dtype=np.int64)), recent)
            self._recent.pop(date, None)
        else:
            self._recent[date] = recent

    def forget_before(self, today: dt.date) -> None:
        """Drop dates older than the horizon (bounded memory on a long-running archiver)."""
        cutoff = today - dt.timedelta(days=self.horizon_days)
        for store in (self._base, self._recent):
            for date in [d for d in store if d < cutoff]:
                del store[date]
