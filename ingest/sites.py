"""Ingest follows the compacted sites topic (``kafka.sites_topic``) into its :class:`SiteRegistry`.

Every ingest worker reads the whole topic with its own :class:`topics.follower.TopicFollower`, so
a site added, changed or removed with ``tally site`` counts here within about a second. Records
and the fold over the seed of ``sites:`` are :mod:`tally.site_registry`'s; a bad record is logged
there and skipped. The follower's ``caught_up`` lets a (re)started worker wait for the runtime
sites before it serves.
"""

from __future__ import annotations

from collections.abc import Mapping

from tally.site_registry import SiteRegistry
from topics.follower import TopicFollower


def follow_sites(
    *, client_config: Mapping[str, str | int | float | bool], topic: str, registry: SiteRegistry
) -> TopicFollower:
    """Start following ``topic`` into ``registry`` (a daemon thread; ``close()`` it on the way out)."""

    def apply(key: bytes | None, value: bytes | None) -> None:
        registry.apply(key, value)

    return TopicFollower(client_config=client_config, topic=topic, apply=apply, reader="ingest")
