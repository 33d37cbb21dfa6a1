"""The dashboard's sites: conf/'s ``sites:`` folded with the sites topic, followed by one thread.

A site added with ``tally site add`` (or the Stats API's admin endpoint) shows in the site picker,
and can be granted and shared, at the next page run; a removed one leaves it. Records and the
fold are :mod:`tally.site_registry`'s, as in ingest and the API (each app follows the topic with
:class:`topics.follower.TopicFollower`). Until the topic has been read (Kafka down), the page shows the seed.
"""

from __future__ import annotations

import streamlit as st

from tally.settings import Settings
from tally.site_registry import SiteRegistry
from topics.follower import TopicFollower


@st.cache_resource(show_spinner=False)
def _registry(settings: Settings) -> SiteRegistry:
    """One registry and follower per dashboard process (and per configuration)."""
    registry = SiteRegistry(seed=settings.sites)

    def apply(key: bytes | None, value: bytes | None) -> None:
        registry.apply(key, value)

    # Never closed: it follows the topic for the life of the dashboard process.
    TopicFollower(
        client_config=settings.kafka.client_config(), topic=settings.kafka.sites_topic, apply=apply, reader="dashboard"
    )
    return registry


def with_current_sites(settings: Settings) -> Settings:
    """``settings`` with the sites configured now: the page, its access checks and share links use these."""
    return settings.with_sites(_registry(settings).sites())
