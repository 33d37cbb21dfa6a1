"""API keys: shown once, kept as a hash, scoped to sites, revocable; and the hourly limit per key."""

from __future__ import annotations

import datetime as dt
import stat

import pytest

from api.keys import ApiKeyError, create_key, keys_path, load_keys, revoke_key, verify
from api.throttle import HourlyLimit
from tally.settings import Settings

NOW = dt.datetime(2026, 11, 25, 12, 0, tzinfo=dt.UTC)
SITE = "demo.tally.local"


def test_a_key_is_stored_only_as_a_hash_in_a_private_file_and_verifies(settings: Settings) -> None:
    key, record = create_key(settings, name="reports", sites=(SITE,), now=NOW)
    text = keys_path(settings).read_text()
    assert key.split("_", 2)[2] not in text and record.secret_sha256 in text
    assert stat.S_IMODE(keys_path(settings).stat().st_mode) == 0o600
    found = verify(load_keys(settings), key)
    assert found is not None and found.may_read(SITE) and not found.may_read("limited.tally.test")


def test_a_wrong_malformed_or_revoked_key_does_not_verify(settings: Settings) -> None:
    key, record = create_key(settings, name="reports", sites=("*",), now=NOW)
    keys = load_keys(settings)
    assert verify(keys, key[:-1] + ("A" if key[-1] != "A" else "B")) is None
    assert verify(keys, "Bearer " + key) is None and verify(keys, "") is None
    revoke_key(settings, record.key_id, now=NOW)
    assert verify(load_keys(settings), key) is None
    assert load_keys(settings)[record.key_id].revoked, "a revoked key is still listed"


def test_unknown_sites_names_and_ids_are_refused_with_what_to_do(settings: Settings) -> None:
    with pytest.raises(ApiKeyError, match="configured site ids"):
        create_key(settings, name="x", sites=("nowhere.test",), now=NOW)
    with pytest.raises(ApiKeyError, match="key name"):
        create_key(settings, name="", sites=(SITE,), now=NOW)
    with pytest.raises(ApiKeyError, match="tally apikey list"):
        revoke_key(settings, "000000000000", now=NOW)


def test_the_hourly_limit_counts_per_key_and_says_how_long_to_wait() -> None:
    limit = HourlyLimit(2)
    hour = 3600 * 500_000
    assert [limit.take("a", hour + 10), limit.take("a", hour + 11)] == [0, 0]
    assert limit.take("a", hour + 600) == 3000, "seconds until the next clock hour"
    assert limit.take("b", hour + 600) == 0, "another key has its own allowance"
    assert limit.take("a", hour + 3600) == 0, "a new hour, a new allowance"
    assert limit.take("a", hour + 100) == 0, "an earlier clock reading counts in the current hour"
    assert limit.take("a", hour + 3601) > 0, "so the current hour's allowance is used up"


def test_an_admin_key_needs_no_site_and_may_manage_sites_until_revoked(settings: Settings) -> None:
    key, record = create_key(settings, name="site admin", sites=(), now=NOW, admin=True)
    found = verify(load_keys(settings), key)
    assert found is not None and found.may_manage_sites and not found.may_read(SITE)
    revoke_key(settings, record.key_id, now=NOW)
    assert not load_keys(settings)[record.key_id].may_manage_sites


def test_a_read_key_may_not_manage_sites_and_needs_a_site(settings: Settings) -> None:
    key, _ = create_key(settings, name="reports", sites=("*",), now=NOW)
    found = verify(load_keys(settings), key)
    assert found is not None and not found.may_manage_sites
    with pytest.raises(ApiKeyError, match="or --admin"):
        create_key(settings, name="nothing", sites=(), now=NOW)


def test_a_key_may_name_a_site_added_at_runtime(settings: Settings) -> None:
    known = {SITE, "runtime.example"}
    _, record = create_key(settings, name="new", sites=("runtime.example",), now=NOW, known_sites=known)
    assert record.sites == ("runtime.example",)
    with pytest.raises(ApiKeyError, match=r"runtime\.example"):
        create_key(settings, name="new", sites=("runtime.example",), now=NOW)  # conf/ alone does not know it


def test_key_records_written_before_scopes_load_as_read_keys(settings: Settings) -> None:
    _, record = create_key(settings, name="old", sites=(SITE,), now=NOW)
    path = keys_path(settings)
    path.write_text(path.read_text().replace(',\n  "admin": false', ""))
    assert "admin" not in path.read_text()
    assert load_keys(settings)[record.key_id].admin is False
