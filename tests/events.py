"""Building stored events for tests that write to Kafka directly (bypassing ingest)."""

from __future__ import annotations

import time
import uuid

from tally.schema import PageViewEvent


def page_view(
    site: str, *, event_id: str | None = None, visitor_id: str | None = None, path: str = "/a"
) -> PageViewEvent:
    """An enriched page view happening now, as ingest would have produced it."""
    now = int(time.time() * 1000)
    return PageViewEvent(
        event_id=event_id or str(uuid.uuid4()),
        type="pageview",
        site_id=site,
        url=f"https://{site}{path}",
        hostname=site,
        path=path,
        ts_event=now,
        ts_sent=now,
        ts_received=now,
        event_time=now,
        visitor_id=visitor_id or uuid.uuid4().hex,
    )
