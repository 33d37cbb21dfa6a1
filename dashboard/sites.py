"""The dashboard's sites: conf/'s ``sites:`` folded with the sites topic, followed by one thread.

A site added with ``tally site add`` (or the Stats API's admin endpoint) shows in the site picker,
and can be granted and shared, at the next page run; a removed one leaves it. Records and the
fold are :mod:`tally.site_registry`'s, as in ingest and the API (each app follows the topic with
:func:`topics.sites.follow_sites`). Until the topic has been read (Kafka down), the page shows the seed.
"""

from __future__ import annotations

from typing import NamedTuple

import streamlit as st

from tally.settings import Settings
from tally.site_registry import SiteRegistry
from topics.follower import TopicFollower
from topics.sites import follow_sites


class FollowedRegistry(NamedTuple):
    """A registry and the follower that keeps it current."""

    registry: SiteRegistry
    follower: TopicFollower


def _stop_following(followed: FollowedRegistry) -> None:
    """Stop the follower when Streamlit releases the cached registry (``st.cache_resource.clear()``).
    Streamlit calls this holding its cache's lock, so nothing here waits: the thread ends on its own
    (:meth:`topics.follower.TopicFollower.close`)."""
    followed.follower.close(timeout=0)


@st.cache_resource(show_spinner=False, on_release=_stop_following)
def _registry(settings: Settings) -> FollowedRegistry:
    """One registry and follower per dashboard process (and per configuration), following the topic
    for as long as the cache keeps them: the life of the process, unless the cache is cleared."""
    registry = SiteRegistry(seed=settings.sites)
    return FollowedRegistry(registry, follow_sites(settings.kafka, registry, reader="dashboard"))


def with_current_sites(settings: Settings) -> Settings:
    """``settings`` with the sites configured now: the page, its access checks and share links use these."""
    return settings.with_sites(_registry(settings).registry.sites())
