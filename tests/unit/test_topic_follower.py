"""A topic follower stops when closed, and its thread closes the consumer (ingest's follower of the
blocks topic too); the dashboard's follower stops when Streamlit releases the cached site
registry. No broker: nothing listens on the port."""

from __future__ import annotations

import pytest

import dashboard.sites
from ingest.blocks import BlockFollower
from ingest.ratelimit import BlockList
from ops.stack import free_ports
from tally.settings import Settings
from topics.follower import TopicFollower

STOP_S = 10  # a metadata request with the broker down lasts up to 5 s; the thread ends after it


def nowhere() -> dict[str, str | int | float | bool]:
    """A client configuration whose broker does not exist (a port nothing listens on)."""
    return {"bootstrap.servers": f"127.0.0.1:{free_ports(1)[0]}"}


def test_a_closed_follower_stops_its_thread_and_the_thread_closes_the_consumer() -> None:
    follower = TopicFollower(client_config=nowhere(), topic="tally-sites", apply=lambda k, v: None, reader="test")
    assert follower._thread.is_alive()
    follower.close(timeout=STOP_S)
    assert not follower._thread.is_alive()
    with pytest.raises(RuntimeError, match="closed"):
        follower._consumer.poll(0)  # closed by the thread, as it ended


def test_after_a_close_that_does_not_wait_the_thread_ends_on_its_own() -> None:
    follower = TopicFollower(client_config=nowhere(), topic="tally-sites", apply=lambda k, v: None, reader="test")
    follower.close(timeout=0)
    follower._thread.join(STOP_S)
    assert not follower._thread.is_alive()


def test_a_closed_block_follower_stops_its_thread_and_the_thread_closes_the_consumer() -> None:
    follower = BlockFollower(client_config=nowhere(), topic="ratelimit.blocks", blocks=BlockList())
    follower.close()
    follower._thread.join(STOP_S)  # a poll lasts 0.5 s
    assert not follower._thread.is_alive()
    with pytest.raises(RuntimeError, match="closed"):
        follower._consumer.poll(0)


@pytest.fixture(autouse=True)
def no_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker address nothing listens on (`settings` reads it)."""
    monkeypatch.setenv("TALLY_KAFKA__BOOTSTRAP_SERVERS", f"127.0.0.1:{free_ports(1)[0]}")


def test_the_dashboards_follower_stops_when_the_cached_registry_is_released(settings: Settings) -> None:
    followed = dashboard.sites._registry(settings)
    assert followed.follower._thread.is_alive()
    assert dashboard.sites._registry(settings) is followed, "one registry and follower per configuration"
    dashboard.sites._registry.clear()  # what st.cache_resource.clear() does to each cached function
    followed.follower._thread.join(STOP_S)
    assert not followed.follower._thread.is_alive()
