"""The fold of the sites topic over the seed (tally.site_registry): pure, no Kafka."""

from __future__ import annotations

import json
import logging

import pytest

from tally.settings import SettingsError, SiteSettings
from tally.site_registry import (
    SiteChange,
    SiteRecordError,
    SiteRegistry,
    decode_record,
    encode_removal,
    encode_site,
    fold,
    new_site,
)

SEED = (SiteSettings("a.example", domains=("a.example",)), SiteSettings("b.example", domains=("b.example",)))


def added(site_id: str, **fields: object) -> tuple[bytes, bytes]:
    site = SiteSettings(site_id, **fields)  # type: ignore[arg-type]
    return site_id.encode(), encode_site(site, at_ms=1)


def removed(site_id: str) -> tuple[bytes, bytes]:
    return site_id.encode(), encode_removal(at_ms=2)


def ids(registry: SiteRegistry) -> list[str]:
    return [s.site_id for s in registry.sites()]


def test_the_seed_alone_is_the_configured_sites() -> None:
    registry = SiteRegistry(seed=SEED)
    assert ids(registry) == ["a.example", "b.example"]
    assert registry.get("a.example") == SEED[0]
    assert registry.origin("a.example") == "seed"
    assert registry.get("c.example") is None


def test_an_added_site_is_configured_after_the_seed_ones() -> None:
    registry = SiteRegistry(seed=SEED)
    registry.apply(*added("c.example", domains=("c.example",), salt_period="week"))
    assert ids(registry) == ["a.example", "b.example", "c.example"]
    site = registry.get("c.example")
    assert site is not None and site.salt_period == "week" and site.domains == ("c.example",)
    assert registry.origin("c.example") == "runtime"


def test_a_record_for_a_seed_site_changes_it_in_place() -> None:
    registry = SiteRegistry(seed=SEED)
    registry.apply(*added("a.example", domains=("a.example", "www.a.example"), hash_routing=True))
    assert ids(registry) == ["a.example", "b.example"]
    site = registry.get("a.example")
    assert site is not None and site.hash_routing and site.domains == ("a.example", "www.a.example")
    assert registry.origin("a.example") == "runtime"


def test_a_removal_removes_a_seed_site_and_a_runtime_one() -> None:
    registry = SiteRegistry(seed=SEED)
    registry.apply(*added("c.example"))
    registry.apply(*removed("a.example"))
    registry.apply(*removed("c.example"))
    assert ids(registry) == ["b.example"]
    assert registry.get("a.example") is None
    assert registry.removed() == ("a.example", "c.example")


def test_a_removed_site_added_again_is_configured_with_its_new_settings() -> None:
    registry = SiteRegistry(seed=SEED)
    registry.apply(*removed("a.example"))
    registry.apply(*added("a.example", honour_opt_out=True))
    site = registry.get("a.example")
    assert site is not None and site.honour_opt_out
    assert registry.removed() == ()


def test_the_last_record_of_a_site_wins_as_after_compaction() -> None:
    records = [added("c.example", salt_period="week"), removed("c.example"), added("c.example", salt_period="month")]
    compacted = records[-1:]
    for kept in (records, compacted):
        registry = SiteRegistry(seed=SEED)
        for key, value in kept:
            registry.apply(key, value)
        site = registry.get("c.example")
        assert site is not None and site.salt_period == "month"


def test_each_applied_change_moves_the_generation_and_a_replay_does_not() -> None:
    registry = SiteRegistry(seed=SEED)
    record = added("c.example")
    registry.apply(*record)
    assert registry.generation == 1
    registry.apply(*record)
    assert registry.generation == 1


@pytest.mark.parametrize(
    ("key", "value", "why"),
    [
        (None, b"{}", "no key"),
        (b"c.example", None, "a null record"),
        (b"c.example", b"not json", "not JSON"),
        (b"c.example", b"[1, 2]", "not a version-1"),
        (b"c.example", json.dumps({"v": 2, "removed": True}).encode(), "not a version-1"),
        (b"c.example", json.dumps({"v": 1}).encode(), "neither"),
        (b"c.example", json.dumps({"v": 1, "site": {"site_id": "d.example"}}).encode(), "not its key"),
        (b"c.example", json.dumps({"v": 1, "site": {"site_id": "c.example", "colour": 1}}).encode(), "unknown key"),
        (
            b"c.example",
            json.dumps({"v": 1, "site": {"site_id": "c.example", "salt_period": "year"}}).encode(),
            "salt_period",
        ),
        (b"c.example", json.dumps({"v": 1, "site": {"domains": ["c.example"]}}).encode(), "site_id: required"),
        (b"\xff", b"{}", "not UTF-8"),
    ],
)
def test_a_bad_record_says_why(key: bytes | None, value: bytes | None, why: str) -> None:
    with pytest.raises(SiteRecordError, match=why):
        decode_record(key, value)


def test_a_bad_record_is_logged_and_skipped_never_raised(caplog: pytest.LogCaptureFixture) -> None:
    registry = SiteRegistry(seed=SEED)
    registry.apply(*added("c.example", salt_period="week"))
    with caplog.at_level(logging.WARNING, logger="tally.sites"):
        assert registry.apply(b"c.example", b"garbage") is None
    assert "bad site record ignored" in caplog.text
    site = registry.get("c.example")
    assert site is not None and site.salt_period == "week"  # the site keeps its last good record


def test_a_record_round_trips_every_field() -> None:
    site = SiteSettings(
        "c.example",
        domains=("c.example", "www.c.example"),
        hash_routing=True,
        client_pageviews_per_hour=7,
        query_params=("ref", "lang"),
        goals=("event:signup", "page:/pricing"),
        salt_period="month",
        honour_opt_out=True,
    )
    change = decode_record(b"c.example", encode_site(site, at_ms=5))
    assert change == SiteChange("c.example", site, 5)
    assert decode_record(b"c.example", encode_removal(at_ms=6)) == SiteChange("c.example", None, 6)


def test_fold_is_the_seed_then_each_change_in_order() -> None:
    changes = [SiteChange("c.example", SiteSettings("c.example")), SiteChange("b.example", None)]
    assert [s.site_id for s in fold(SEED, changes)] == ["a.example", "c.example"]


def test_a_new_site_lowers_its_domains_and_refuses_urls_and_bad_ids() -> None:
    site = new_site({"site_id": "c.example", "domains": ["C.example", "www.c.example", "c.example"]})
    assert site.domains == ("c.example", "www.c.example")
    with pytest.raises(SettingsError, match=r"not a host name.*no scheme"):
        new_site({"site_id": "c.example", "domains": ["https://c.example/"]})
    with pytest.raises(SettingsError, match="site_id 'c example'"):
        new_site({"site_id": "c example"})
    with pytest.raises(SettingsError, match="salt_period"):
        new_site({"site_id": "c.example", "salt_period": "fortnight"})
