"""Rate limits, enforced in-process at once (pure: no Kafka here).

- per client (hashed IP) and site per hour: page views in the current clock hour, limit per site
  (the seed's "100 requests per hour from any particular IP address"), and the other events
  (custom, engagement, vitals) in the same hour, ``ratelimit.client_events_per_hour``; each site
  counts its own, so a request naming several sites is checked against each of them;
- per site per second: a token bucket on all events of the site;
- blocks published by the Spark jobs on the compacted ``ratelimit.blocks`` topic, so every
  ingest replica refuses a client the jobs flagged (see :class:`BlockList`);
- per client per minute, the dead letters stored whole (see :class:`RefusalLimiter`): a refusal
  costs the client nothing, so without it anyone could fill the disk with 16 KiB dead letters.
"""

from __future__ import annotations

from dataclasses import dataclass

HOUR_MS = 3_600_000
MINUTE_MS = 60_000


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str = ""
    retry_after_s: int = 0


ALLOW = Verdict(True)


class TokenBucket:
    """``rate`` tokens per second, bursts up to ``rate``."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.tokens = rate
        self.updated_ms = 0

    def take(self, count: int, now_ms: int) -> bool:
        elapsed = max(0, now_ms - self.updated_ms) / 1000
        self.tokens = min(self.rate, self.tokens + elapsed * self.rate)
        self.updated_ms = now_ms
        if self.tokens >= count:
            self.tokens -= count
            return True
        return False


class BlockList:
    """Clients blocked until a time, as last published on ``ratelimit.blocks`` (key: client hash)."""

    def __init__(self) -> None:
        self._until: dict[str, int] = {}

    def update(self, client_hash: str, blocked_until_ms: int | None) -> None:
        """Apply one record of the compacted topic; a tombstone (None) lifts the block."""
        if blocked_until_ms is None:
            self._until.pop(client_hash, None)
        else:
            self._until[client_hash] = blocked_until_ms

    def blocked_until(self, client_hash: str, now_ms: int) -> int | None:
        until = self._until.get(client_hash)
        return until if until is not None and until > now_ms else None

    def __len__(self) -> int:
        return len(self._until)


class RateLimiter:
    """Decides, per request, whether a client and a site are within their limits."""

    def __init__(self, *, site_events_per_second: float, blocks: BlockList | None = None) -> None:
        self.site_events_per_second = site_events_per_second
        self.blocks = blocks if blocks is not None else BlockList()
        self._hour = -1
        self._client_counts: dict[tuple[str, str], list[int]] = {}  # (client, site) -> [page views, other events]
        self._site_buckets: dict[str, TokenBucket] = {}

    def check(
        self,
        *,
        client_hash: str,
        site_id: str,
        pageviews: int,
        events: int,
        client_limit_per_hour: int,
        now_ms: int,
        client_events_per_hour: int = 0,
    ) -> Verdict:
        """Count one request's events of one site and say whether they may pass; refused ones are
        not counted. ``events``: all of them, ``pageviews`` among them; ``client_events_per_hour``:
        the bound on the others (0: none)."""
        until = self.blocks.blocked_until(client_hash, now_ms)
        if until is not None:
            return Verdict(False, "client blocked by the rate-limit job", _seconds(until - now_ms))
        hour = now_ms // HOUR_MS
        if hour != self._hour:  # a new clock hour: the per-hour counters start again
            self._hour, self._client_counts = hour, {}
        seen = self._client_counts.get((client_hash, site_id)) or [0, 0]
        others = events - pageviews
        retry = _seconds((hour + 1) * HOUR_MS - now_ms)
        if pageviews and seen[0] + pageviews > client_limit_per_hour:
            return Verdict(False, f"more than {client_limit_per_hour} page views per hour from this client", retry)
        if others and client_events_per_hour and seen[1] + others > client_events_per_hour:
            reason = f"more than {client_events_per_hour} events other than page views per hour from this client"
            return Verdict(False, reason, retry)
        bucket = self._site_buckets.get(site_id)
        if bucket is None:
            bucket = self._site_buckets[site_id] = TokenBucket(self.site_events_per_second)
        if not bucket.take(events, now_ms):
            return Verdict(False, f"site over {self.site_events_per_second:g} events per second", 1)
        self._client_counts[(client_hash, site_id)] = [seen[0] + pageviews, seen[1] + others]
        return ALLOW


def _seconds(ms: int) -> int:
    return max(1, -(-ms // 1000))


@dataclass(frozen=True)
class SuppressedRefusals:
    """A client's refusals of one site and kind in one clock minute that were counted, not stored."""

    client_hash: str
    site_id: str  # a configured site, or "" (the request named none, or one that is not configured)
    kind: str
    status: int
    minute_ms: int  # the start of the minute
    count: int
    last_at_ms: int  # when the last of them was received


class RefusalLimiter:
    """Which refusals are stored whole: a client's first ``per_minute`` of each clock minute.

    Past that, refusals are counted per client, site and kind, and :meth:`closed` hands out each
    count once its minute is over, for ingest to store one summary record per count. Sites are
    configured ones or "": an unknown site id is whatever the client sent, so it must not make
    a key of its own. ``per_minute`` 0: every refusal is stored whole.
    """

    def __init__(self, *, per_minute: int) -> None:
        assert per_minute >= 0, "settings refuse a negative ratelimit.client_refusals_per_minute"
        self.per_minute = per_minute
        self._minute = -1
        self._stored: dict[str, int] = {}  # client hash -> refusals stored whole this minute
        self._counted: dict[tuple[str, str, str], list[int]] = {}  # (client, site, kind) -> [status, count, last]
        self._closed: list[SuppressedRefusals] = []

    def admit(self, *, client_hash: str, site_id: str, kind: str, status: int, now_ms: int) -> bool:
        """True: store this refusal whole. False: it is counted instead (over the client's limit)."""
        # Never back to an older minute: a request whose body came slowly carries an earlier time,
        # and reopening that minute would give every client a fresh allowance.
        minute = max(now_ms // MINUTE_MS, self._minute)
        if minute != self._minute:
            self._close(minute)
        stored = self._stored.get(client_hash, 0)
        if not self.per_minute or stored < self.per_minute:
            self._stored[client_hash] = stored + 1
            return True
        tally = self._counted.setdefault((client_hash, site_id, kind), [status, 0, now_ms])
        tally[1] += 1
        tally[2] = max(tally[2], now_ms)
        return False

    def closed(self, now_ms: int) -> list[SuppressedRefusals]:
        """The counts of the minutes before ``now_ms``'s, each handed out once."""
        if now_ms // MINUTE_MS > self._minute:
            self._close(now_ms // MINUTE_MS)
        found, self._closed = self._closed, []
        return found

    def drain(self) -> list[SuppressedRefusals]:
        """Every count, the current minute's too (ingest is stopping)."""
        self._close(self._minute)
        found, self._closed = self._closed, []
        return found

    def _close(self, minute: int) -> None:
        start = self._minute * MINUTE_MS
        self._closed += [
            SuppressedRefusals(client, site, kind, status, start, count, last)
            for (client, site, kind), (status, count, last) in self._counted.items()
        ]
        self._minute, self._stored, self._counted = minute, {}, {}
