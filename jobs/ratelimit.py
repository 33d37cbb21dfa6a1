"""Rate-limit counters: page views per hashed client per site per hour, and the blocks they cause.

Ingest enforces limits in-process at once, but each replica sees only its share of a client's
requests. This view counts across all replicas; a client over its site's hourly limit is
published to the compacted ``ratelimit.blocks`` topic (key: client hash, value: blocked-until),
which every ingest replica follows. Bots count here: rate limits exist for abusive clients.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from jobs.views import event_date, is_pageview
from tally.settings import Settings


def ratelimit_counts(events: DataFrame) -> DataFrame:
    """Page views per (site, client hash) in 1-hour tumbling windows of event time."""
    window = F.window("event_ts", "1 hour")
    return (
        events.where(is_pageview() & (F.coalesce(F.col("client_hash"), F.lit("")) != ""))
        .groupBy(F.col("site_id"), F.col("client_hash"), window.alias("w"))
        .agg(F.count(F.lit(1)).alias("pageviews"))
        .select(
            "site_id",
            "client_hash",
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "pageviews",
            event_date("w.start"),
        )
    )


@dataclass(frozen=True)
class Block:
    """A client to refuse until ``blocked_until_ms`` (the end of the hour it went over)."""

    client_hash: str
    site_id: str
    pageviews: int
    limit: int
    blocked_until_ms: int

    def record(self) -> tuple[bytes, bytes]:
        """The compacted-topic record: key = client hash, value = JSON with the block's end."""
        value = {"blocked_until": self.blocked_until_ms, "site_id": self.site_id, "pageviews": self.pageviews}
        return self.client_hash.encode(), json.dumps(value, separators=(",", ":")).encode()


def over_limit(counts: list[tuple[str, str, int, int]], settings: Settings, *, now_ms: int) -> list[Block]:
    """Blocks for the (site, client, page views, window end ms) rows above the site's limit.

    Only windows still open matter: a block for an hour that has ended would lift at once.
    """
    blocks = []
    for site_id, client_hash, pageviews, window_end_ms in counts:
        if window_end_ms <= now_ms:
            continue
        site = settings.site(site_id)
        limit = settings.client_limit(site) if site else settings.ratelimit.client_pageviews_per_hour
        if pageviews > limit:
            blocks.append(Block(client_hash, site_id, pageviews, limit, window_end_ms))
    return blocks
