"""The dashboard's sites: conf/'s ``sites:`` folded with the sites topic, followed by one thread.

A site added with ``tally site add`` (or the Stats API's admin endpoint) shows in the site picker,
and can be granted and shared, at the next page run; a removed one leaves it. Records and the
fold are :mod:`tally.site_registry`'s, as in ingest and the API (each app follows the topic itself:
an app imports no other app). Until the topic has been read (Kafka down), the page shows the seed.
"""

from __future__ import annotations

import logging
import threading
import uuid

import streamlit as st
from confluent_kafka import Consumer, KafkaException, TopicPartition

from tally.log import kv
from tally.settings import Settings
from tally.site_registry import SiteRegistry

log = logging.getLogger("tally.dashboard.sites")

RETRY_S = 2.0


class SiteFollower:
    """One consumer thread that applies every record of the sites topic to ``registry``."""

    def __init__(self, settings: Settings, registry: SiteRegistry) -> None:
        self.registry, self.topic = registry, settings.kafka.sites_topic
        self._consumer = Consumer(
            {
                **settings.kafka.client_config(),
                "group.id": f"tally-dashboard-sites-{uuid.uuid4().hex}",  # never joined nor committed: assigned
                "enable.auto.commit": False,
                "log_level": 2,  # not each refused connection: the page shows the seed meanwhile, logged once below
            }
        )
        self._thread = threading.Thread(target=self._run, name="sites", daemon=True)
        self._thread.start()

    def _assign(self) -> bool:
        try:
            metadata = self._consumer.list_topics(self.topic, timeout=5).topics.get(self.topic)
        except KafkaException:
            return False
        if metadata is None or metadata.error is not None or not metadata.partitions:
            return False
        self._consumer.assign([TopicPartition(self.topic, p, 0) for p in sorted(metadata.partitions)])
        return True

    def _run(self) -> None:
        if not self._assign():
            log.warning("sites topic not readable yet: showing the sites of conf/", extra=kv(topic=self.topic))
            while not self._assign():
                threading.Event().wait(RETRY_S)
        log.info("following the sites topic", extra=kv(topic=self.topic))
        while True:  # a daemon thread for the life of the dashboard process
            msg = self._consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                log.warning("sites topic error", extra=kv(error=str(msg.error())))
                continue
            self.registry.apply(msg.key(), msg.value())


@st.cache_resource(show_spinner=False)
def _registry(settings: Settings) -> SiteRegistry:
    """One registry and follower per dashboard process (and per configuration)."""
    registry = SiteRegistry(seed=settings.sites)
    SiteFollower(settings, registry)
    return registry


def with_current_sites(settings: Settings) -> Settings:
    """``settings`` with the sites configured now: the page, its access checks and share links use these."""
    return settings.with_sites(_registry(settings).sites())
