"""Rate limits, enforced in-process at once (pure: no Kafka here).

- per client (hashed IP) per hour: page views in the current clock hour, limit per site
  (the seed's "100 requests per hour from any particular IP address");
- per site per second: a token bucket on all events of the site;
- blocks published by the Spark jobs on the compacted ``ratelimit.blocks`` topic, so every
  ingest replica refuses a client the jobs flagged (see :class:`BlockList`).
"""

from __future__ import annotations

from dataclasses import dataclass

HOUR_MS = 3_600_000


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
        self._client_pageviews: dict[str, int] = {}
        self._site_buckets: dict[str, TokenBucket] = {}

    def check(
        self, *, client_hash: str, site_id: str, pageviews: int, events: int, client_limit_per_hour: int, now_ms: int
    ) -> Verdict:
        """Count this request and say whether it may pass; refused requests are not counted."""
        until = self.blocks.blocked_until(client_hash, now_ms)
        if until is not None:
            return Verdict(False, "client blocked by the rate-limit job", _seconds(until - now_ms))
        hour = now_ms // HOUR_MS
        if hour != self._hour:  # a new clock hour: the per-hour counters start again
            self._hour, self._client_pageviews = hour, {}
        seen = self._client_pageviews.get(client_hash, 0)
        if pageviews and seen + pageviews > client_limit_per_hour:
            retry = _seconds((hour + 1) * HOUR_MS - now_ms)
            return Verdict(False, f"more than {client_limit_per_hour} page views per hour from this client", retry)
        bucket = self._site_buckets.get(site_id)
        if bucket is None:
            bucket = self._site_buckets[site_id] = TokenBucket(self.site_events_per_second)
        if not bucket.take(events, now_ms):
            return Verdict(False, f"site over {self.site_events_per_second:g} events per second", 1)
        self._client_pageviews[client_hash] = seen + pageviews
        return ALLOW


def _seconds(ms: int) -> int:
    return max(1, -(-ms // 1000))
