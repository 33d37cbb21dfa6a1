"""The compacted sites topic (``kafka.sites_topic``): followed into a :class:`SiteRegistry` (the one
piece ingest, the Stats API, the dashboard and the views job each start), and written.

Each process reads the whole topic with its own :class:`topics.follower.TopicFollower`, so a site
added, changed or removed with ``tally site`` counts there within about a second. Records and the
fold over the seed of ``sites:`` are :mod:`tally.site_registry`'s; a bad record is logged there and
skipped. The follower's ``caught_up`` lets a (re)started process wait for the runtime sites.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer

from tally.settings import KafkaSettings
from tally.site_registry import SiteChange, SiteRegistry, encode_removal, encode_site
from topics.follower import TopicFollower


class SiteWriteFailed(Exception):
    """Kafka did not store a site record; the message says why (nothing changed)."""


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


def change_record(change: SiteChange) -> bytes:
    """The topic's value for a change: the site as it now is, or its removal."""
    if change.site is None:
        return encode_removal(at_ms=change.at_ms)
    return encode_site(change.site, at_ms=change.at_ms)


def write_site_record(kafka: KafkaSettings, site_id: str, value: bytes, *, timeout: float) -> None:
    """Append one record to the sites topic (acks=all, idempotent), the one way ``tally site`` and
    the Stats API's admin endpoints write it; :class:`SiteWriteFailed` when Kafka did not store it."""
    failures: list[str] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            failures.append(str(error))

    producer = Producer({**kafka.client_config(), "acks": "all", "enable.idempotence": True})
    producer.produce(kafka.sites_topic, key=site_id.encode(), value=value, on_delivery=delivered)
    if producer.flush(timeout) or failures:
        raise SiteWriteFailed(", ".join(failures) or f"timed out after {timeout:.0f}s")
