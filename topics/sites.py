"""Follow the compacted sites topic (``kafka.sites_topic``) into a :class:`SiteRegistry`: the one
piece ingest, the Stats API, the dashboard and the views job each start.

Each process reads the whole topic with its own :class:`topics.follower.TopicFollower`, so a site
added, changed or removed with ``tally site`` counts there within about a second. Records and the
fold over the seed of ``sites:`` are :mod:`tally.site_registry`'s; a bad record is logged there and
skipped. The follower's ``caught_up`` lets a (re)started process wait for the runtime sites.
"""

from __future__ import annotations

from collections.abc import Callable

from tally.settings import KafkaSettings
from tally.site_registry import SiteChange, SiteRegistry
from topics.follower import TopicFollower


def follow_sites(
    kafka: KafkaSettings,
    registry: SiteRegistry,
    *,
    reader: str,
    on_change: Callable[[SiteChange], None] | None = None,
) -> TopicFollower:
    """Start following the sites topic into ``registry`` (a daemon thread; ``close()`` it on the way
    out); ``on_change`` is called after each record that changed a site; ``reader`` names the process
    in the follower's logs."""

    def apply(key: bytes | None, value: bytes | None) -> None:
        change = registry.apply(key, value)
        if change is not None and on_change is not None:
            on_change(change)

    return TopicFollower(client_config=kafka.client_config(), topic=kafka.sites_topic, apply=apply, reader=reader)
