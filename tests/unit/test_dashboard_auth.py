"""Dashboard access, pure logic: password hashes, users, viewers, sessions, throttling, share tokens."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from dashboard.auth import (
    effective_query,
    load_users,
    oidc_providers,
    upgrade_password_hash,
    user_for_email,
    users_path,
    viewer_for_user,
    visible_sites,
    write_file_users,
)
from dashboard.passwords import authenticate, b64_url, hash_password, needs_rehash, unb64_url, verify_password
from dashboard.sessions import Sessions
from dashboard.share_links import AccessDenied, ShareGrant, ShareLinks, make_share_token, parse_view, secret_key
from dashboard.throttle import LoginThrottle
from ops.access_commands import ensure_admin, saved_admin_login
from tally.settings import DashboardSettings, DashboardUser, Settings, SettingsError, SiteSettings

NOW = 1_790_000_000.0
CHEAP = 1024  # scrypt N for the tests' hashes (the default, 2^17, takes 128 MiB and ~0.5 s)
FAST = DashboardSettings(password_scrypt_n=CHEAP)


def cheap_hash(password: str) -> str:
    return hash_password(password, n=CHEAP)


@pytest.fixture(autouse=True)
def two_sites_and_cheap_hashes(monkeypatch: pytest.MonkeyPatch) -> None:
    """conf's sites are a.test and b.test, and new hashes cost CHEAP (as in FAST)."""
    monkeypatch.setenv("TALLY_SITES", "[{site_id: a.test}, {site_id: b.test}]")
    monkeypatch.setenv("TALLY_DASHBOARD__PASSWORD_SCRYPT_N", str(CHEAP))


@pytest.fixture
def sharing(settings: Settings) -> Settings:
    """The settings with ``ann`` (every site), who makes the share links below."""
    write_file_users(settings, [DashboardUser("ann", cheap_hash("ann-secret-1"), ("*",))])
    return settings


def test_a_password_verifies_against_its_hash_and_a_wrong_one_does_not() -> None:
    stored = hash_password("correct horse")
    assert stored.startswith("scrypt$131072$8$1$")  # N=2^17: 128 MiB per check
    assert verify_password("correct horse", stored)
    assert not verify_password("correct horsE", stored)
    assert cheap_hash("correct horse") != cheap_hash("correct horse")  # a fresh salt every time


def test_a_hash_below_todays_cost_needs_a_rehash_and_a_current_one_does_not() -> None:
    old = cheap_hash("correct horse")
    assert needs_rehash(old) and needs_rehash(old, n=2 * CHEAP) and not needs_rehash(old, n=CHEAP)
    assert not needs_rehash("not a hash")


def test_a_successful_login_with_an_old_hash_stores_a_new_one_of_the_same_password(settings: Settings) -> None:
    stronger = dataclasses.replace(settings, dashboard=DashboardSettings(password_scrypt_n=2 * CHEAP))
    ann = DashboardUser("ann", cheap_hash("ann-secret-1"), ("a.test",), "ann@example.org")
    write_file_users(settings, [ann])
    upgraded = upgrade_password_hash(stronger, ann, "ann-secret-1")
    assert upgraded.password_hash.startswith(f"scrypt${2 * CHEAP}$") and upgraded.sites == ann.sites
    assert load_users(settings)["ann"] == upgraded and verify_password("ann-secret-1", upgraded.password_hash)
    assert upgrade_password_hash(stronger, upgraded, "ann-secret-1") == upgraded  # current: unchanged


def test_a_config_users_old_hash_is_not_rewritten(settings: Settings) -> None:
    ann = DashboardUser("ann", cheap_hash("ann-secret-1"), ("a.test",))
    configured = dataclasses.replace(settings, dashboard=DashboardSettings(users=(ann,), password_scrypt_n=2 * CHEAP))
    assert upgrade_password_hash(configured, ann, "ann-secret-1") == ann
    assert not users_path(settings).exists()


@pytest.mark.parametrize("n", [1000, 512, 2**19])
def test_a_password_cost_that_is_not_a_power_of_two_in_range_is_a_settings_error(n: int) -> None:
    with pytest.raises(SettingsError, match=r"dashboard\.password_scrypt_n"):
        DashboardSettings(password_scrypt_n=n)


@pytest.mark.parametrize(
    "stored",
    [
        "",
        "plain-text-password",
        "bcrypt$16384$8$1$c2FsdA$aGFzaA",
        "scrypt$16384$8$1$c2FsdA",
        "scrypt$sixteen$8$1$c2FsdA$aGFzaGhhc2hoYXNoaGFzaA",
        "scrypt$1000$8$1$c2FsdA$aGFzaGhhc2hoYXNoaGFzaA",  # n not a power of two
        "scrypt$1073741824$8$1$c2FsdA$aGFzaGhhc2hoYXNoaGFzaA",  # would need 1 TiB
        "scrypt$16384$8$1$!!!$???",
    ],
)
def test_a_malformed_stored_hash_is_false_and_never_an_error(stored: str) -> None:
    assert verify_password("anything", stored) is False


def test_authentication_needs_a_known_user_with_a_password(settings: Settings) -> None:
    users = {
        "ann": DashboardUser("ann", cheap_hash("ann-secret-1"), ("a.test",)),
        "sso": DashboardUser("sso", "", ("a.test",), "sso@example.org"),
    }
    assert authenticate(users, "ann", "ann-secret-1", n=CHEAP) == users["ann"]
    assert authenticate(users, "ann", "wrong", n=CHEAP) is None
    assert authenticate(users, "nobody", "ann-secret-1", n=CHEAP) is None
    assert authenticate(users, "sso", "", n=CHEAP) is None  # an OIDC-only user has no password to match


def test_a_config_user_wins_over_a_file_user_of_the_same_name(settings: Settings) -> None:
    write_file_users(settings, [DashboardUser("ann", "file-hash", ("b.test",)), DashboardUser("bob", "h", ("*",))])
    configured = dataclasses.replace(
        settings, dashboard=DashboardSettings(users=(DashboardUser("ann", "conf-hash", ("a.test",)),))
    )
    users = load_users(configured)
    assert users["ann"].password_hash == "conf-hash" and users["bob"].sites == ("*",)
    assert stat.S_IMODE(os.stat(users_path(settings)).st_mode) == 0o600


def test_a_broken_users_file_is_a_settings_error_naming_the_file(settings: Settings) -> None:
    users_path(settings).parent.mkdir(parents=True)
    users_path(settings).write_text("users:\n  - {name: ann, sites: a.test}\n")
    with pytest.raises(SettingsError, match=r"users\.yaml: users\[0\]"):
        load_users(settings)


def test_a_user_granted_site_a_sees_a_only_and_a_star_user_sees_every_configured_site(settings: Settings) -> None:
    ann = viewer_for_user(DashboardUser("ann", "h", ("a.test", "gone.test")), settings)
    assert ann.may_see("a.test") and not ann.may_see("b.test")
    assert not ann.may_see("gone.test")  # granted, but no longer configured
    assert visible_sites(ann, settings) == ["a.test"]
    admin = viewer_for_user(DashboardUser("admin", "h", ("*",)), settings)
    assert admin.sites is None and visible_sites(admin, settings) == ["a.test", "b.test"]
    assert not admin.may_see("unconfigured.test")
    nobody = viewer_for_user(DashboardUser("nobody", "h", ()), settings)
    assert visible_sites(nobody, settings) == []


def test_a_pinned_view_replaces_the_urls_parameters(settings: Settings) -> None:
    viewer = dataclasses.replace(
        viewer_for_user(DashboardUser("x", "h", ("a.test",)), settings), pinned_view={"site": "a.test", "range": "30d"}
    )
    assert effective_query(viewer, {"site": "b.test", "share": "t"}) == {"site": "a.test", "range": "30d"}
    plain = viewer_for_user(DashboardUser("x", "h", ("a.test",)), settings)
    assert effective_query(plain, {"site": "a.test", "share": "t"}) == {"site": "a.test"}


def test_a_session_ends_after_its_minutes_or_when_the_password_changes_or_the_user_goes(settings: Settings) -> None:
    ann = DashboardUser("ann", cheap_hash("ann-secret-1"), ("a.test",))
    sessions = Sessions(dataclasses.replace(settings, dashboard=dataclasses.replace(FAST, session_minutes=60)))
    cookie = sessions.cookie_value(sessions.create(ann, now=NOW))
    stored = [path.read_text() for path in sessions.folder.iterdir() if path.suffix == ".json"]
    assert len(stored) == 1 and cookie.partition(".")[0] not in stored[0], "the session id is not kept"
    assert sessions.user(cookie, {"ann": ann}, now=NOW + 59 * 60) == ann
    assert sessions.user(cookie, {"ann": ann}, now=NOW + 61 * 60) is None
    cookie = sessions.cookie_value(sessions.create(ann, now=NOW))
    changed = dataclasses.replace(ann, password_hash=cheap_hash("ann-secret-2"))
    assert sessions.user(cookie, {"ann": changed}, now=NOW) is None
    cookie = sessions.cookie_value(sessions.create(ann, now=NOW))
    assert sessions.user(cookie, {}, now=NOW) is None
    assert sessions.user(None, {"ann": ann}, now=NOW) is None
    assert not sessions.active(now=NOW), "each ended session's record is deleted"


def test_a_session_cookie_is_signed_and_its_record_private(settings: Settings) -> None:
    ann = DashboardUser("ann", cheap_hash("ann-secret-1"), ("a.test",))
    sessions = Sessions(settings)
    session_id = sessions.create(ann, now=NOW)
    cookie = sessions.cookie_value(session_id)
    assert sessions.session_id(cookie) == session_id
    assert sessions.session_id(session_id) is None and sessions.session_id(cookie + "0") is None
    assert sessions.session_id(f"{session_id}x.{cookie.rpartition('.')[2]}") is None
    assert [stat.S_IMODE(p.stat().st_mode) for p in sessions.folder.glob("*.json")] == [0o600]
    assert sessions.delete_user("ann") == 1 and sessions.user(cookie, {"ann": ann}, now=NOW) is None


def test_a_form_token_is_for_one_purpose_and_session_and_expires(settings: Settings) -> None:
    sessions = Sessions(settings)
    token = sessions.form_token("logout", now=NOW, bound_to="s1")
    assert sessions.form_token_ok(token, "logout", now=NOW + 60, bound_to="s1")
    assert not sessions.form_token_ok(token, "logout", now=NOW + 60, bound_to="s2")
    assert not sessions.form_token_ok(token, "login", now=NOW + 60)
    assert not sessions.form_token_ok(token, "logout", now=NOW + 7 * 3600, bound_to="s1")
    altered = token[:-1] + ("1" if token.endswith("0") else "0")
    assert not sessions.form_token_ok(altered, "logout", now=NOW, bound_to="s1")


def test_the_throttle_lets_the_first_attempts_through_then_delays_each_twice_as_long() -> None:
    throttle = LoginThrottle(max_attempts=6, window_seconds=600, free_attempts=2, first_delay_seconds=1)
    assert [throttle.attempt("ann", "ip1", NOW) for _ in range(2)] == [0.0, 0.0]
    assert throttle.attempt("ann", "ip1", NOW) == pytest.approx(1)  # refused: nothing counted
    assert throttle.attempt("ann", "ip1", NOW + 1) == 0.0
    assert throttle.attempt("ann", "ip1", NOW + 2) == pytest.approx(1)  # now 2 s after the last one
    assert throttle.attempt("ann", "ip1", NOW + 3) == 0.0
    assert throttle.attempt("ann", "ip1", NOW + 6) == pytest.approx(1)  # 4 s after the last one


def test_the_throttle_blocks_a_pair_after_max_attempts_until_the_oldest_leaves_the_window() -> None:
    throttle = LoginThrottle(max_attempts=3, window_seconds=600, free_attempts=3)
    assert [throttle.attempt("ann", "ip1", NOW + i) for i in range(3)] == [0.0, 0.0, 0.0]
    assert throttle.attempt("ann", "ip1", NOW + 3) == pytest.approx(597)
    assert throttle.attempt("ann", "ip1", NOW + 601) == 0.0


def test_a_name_throttled_from_one_address_may_still_log_in_from_another() -> None:
    throttle = LoginThrottle(max_attempts=3, free_attempts=3)
    for i in range(3):
        throttle.attempt("admin", "203.0.113.66", NOW + i)
    assert throttle.attempt("admin", "203.0.113.66", NOW + 3) > 0
    assert throttle.attempt("admin", "198.51.100.7", NOW + 3) == 0.0
    assert throttle.attempt("bob", "203.0.113.66", NOW + 3) == 0.0


def test_a_successful_login_clears_only_its_own_pair() -> None:
    throttle = LoginThrottle(max_attempts=1, free_attempts=1)
    throttle.attempt("ann", "ip1", NOW)
    throttle.attempt("ann", "ip2", NOW)
    throttle.succeeded("ann", "ip1")
    assert throttle.attempt("ann", "ip1", NOW) == 0.0 and throttle.attempt("ann", "ip2", NOW) > 0


def test_parallel_attempts_for_one_pair_get_at_most_the_allowed_number() -> None:
    throttle = LoginThrottle(max_attempts=5, free_attempts=5)
    start = threading.Barrier(40)
    allowed: list[bool] = []

    def attempt() -> None:
        start.wait()
        allowed.append(throttle.attempt("admin", "ip1", NOW) == 0.0)

    threads = [threading.Thread(target=attempt) for _ in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert allowed.count(True) == 5


def test_the_throttle_remembers_a_bounded_number_of_pairs() -> None:
    throttle = LoginThrottle(max_attempts=1, free_attempts=1, max_keys=2)
    for name in ("a", "b", "c"):
        throttle.attempt(name, "ip", NOW)
    assert throttle.attempt("a", "ip", NOW) == 0.0 and throttle.attempt("c", "ip", NOW) > 0


def test_an_identity_provider_email_maps_to_exactly_one_user() -> None:
    users = [
        DashboardUser("ann", "", ("a.test",), "Ann@Example.org"),
        DashboardUser("bob", "", ("b.test",), "bob@example.org"),
        DashboardUser("bob2", "", ("*",), "bob@example.org"),
    ]
    assert user_for_email(users, " ann@example.ORG ", verified=True) == users[0]
    assert user_for_email(users, "bob@example.org", verified=True) is None  # ambiguous: refuse rather than guess
    assert user_for_email(users, "eve@example.org", verified=True) is None
    assert user_for_email(users, None, verified=True) is None


@pytest.mark.parametrize("verified", [False, None, "true", 1])
def test_an_identity_provider_email_counts_only_when_email_verified_is_true(verified: object) -> None:
    users = [DashboardUser("ann", "", ("a.test",), "ann@example.org")]
    assert user_for_email(users, "ann@example.org", verified=verified) is None


def test_oidc_providers_are_the_named_auth_tables_or_the_default_one() -> None:
    shared = {"redirect_uri": "http://127.0.0.1:8792/oauth2callback", "cookie_secret": "x"}
    assert oidc_providers({**shared, "google": {"client_id": "g"}, "okta": {"client_id": "o"}}) == ["google", "okta"]
    assert oidc_providers({**shared, "client_id": "c", "server_metadata_url": "https://idp/.well-known"}) == [None]
    assert oidc_providers(shared) == []


def test_the_first_run_creates_admin_once_with_a_private_password_file(settings: Settings) -> None:
    created = ensure_admin(settings)
    assert created is not None and created.name == "admin" and len(created.password) >= 20
    assert created.path.read_text().strip() == created.password
    assert stat.S_IMODE(os.stat(created.path).st_mode) == 0o600
    assert created.password not in users_path(settings).read_text()
    assert authenticate(load_users(settings), "admin", created.password) is not None
    assert ensure_admin(settings) is None
    assert saved_admin_login(settings) == created


def test_no_admin_is_created_when_a_user_exists(settings: Settings) -> None:
    write_file_users(settings, [DashboardUser("ann", cheap_hash("ann-secret-1"), ("a.test",))])
    assert ensure_admin(settings) is None
    assert set(load_users(settings)) == {"ann"} and saved_admin_login(settings) is None


# --- share links ------------------------------------------------------------------------------


def _flip(text: str, index: int) -> str:
    return text[:index] + ("A" if text[index] != "A" else "B") + text[index + 1 :]


def test_a_share_token_opens_its_site_and_view(sharing: Settings) -> None:
    links = ShareLinks(sharing)
    link, token = links.create(site="a.test", view={"range": "30d"}, days=7, creator="ann", now=NOW)
    grant = links.read(token, now=NOW + 6 * 86400)
    assert (grant.link_id, grant.site, dict(grant.view)) == (link.link_id, "a.test", {"range": "30d", "site": "a.test"})
    assert token not in links.path.read_text() and token.split(".")[1] not in links.path.read_text()
    assert stat.S_IMODE(os.stat(links.path).st_mode) == 0o600


@pytest.mark.parametrize("part", ["payload", "signature"])
def test_a_token_with_one_character_changed_is_refused_as_tampered(sharing: Settings, part: str) -> None:
    _, token = ShareLinks(sharing).create(site="a.test", view={}, days=7, creator="ann", now=NOW)
    payload, signature = token.split(".")
    tampered = f"{_flip(payload, 10)}.{signature}" if part == "payload" else f"{payload}.{_flip(signature, 5)}"
    with pytest.raises(AccessDenied) as refused:
        ShareLinks(sharing).read(tampered, now=NOW)
    assert refused.value.kind == "tampered"


def test_a_token_whose_payload_names_another_site_is_refused_without_the_key(sharing: Settings) -> None:
    _, token = ShareLinks(sharing).create(site="a.test", view={}, days=7, creator="ann", now=NOW)
    payload, signature = token.split(".")
    forged = json.loads(unb64_url(payload)) | {"site": "b.test", "view": {"site": "b.test"}}
    with pytest.raises(AccessDenied, match="damaged or was altered"):
        ShareLinks(sharing).read(f"{b64_url(json.dumps(forged).encode())}.{signature}", now=NOW)
    for junk in ("", "no-dot", "a.b.c", "é.é", "x" * 5000):
        with pytest.raises(AccessDenied):
            ShareLinks(sharing).read(junk, now=NOW)


def test_an_expired_token_is_refused_with_its_expiry(sharing: Settings) -> None:
    _, token = ShareLinks(sharing).create(site="a.test", view={}, days=1, creator="ann", now=NOW)
    with pytest.raises(AccessDenied, match="expired on 2026-09-2") as refused:
        ShareLinks(sharing).read(token, now=NOW + 86400)
    assert refused.value.kind == "expired"


def test_a_revoked_token_is_refused_at_once(sharing: Settings) -> None:
    links = ShareLinks(sharing)
    link, token = links.create(site="a.test", view={}, days=7, creator="ann", now=NOW)
    other, other_token = links.create(site="b.test", view={}, days=7, creator="ann", now=NOW)
    assert links.revoke(link.link_id, now=NOW + 1) is not None
    with pytest.raises(AccessDenied) as refused:
        links.read(token, now=NOW + 2)
    assert refused.value.kind == "revoked"
    assert links.read(other_token, now=NOW + 2).link_id == other.link_id
    assert [x.status(NOW + 2) for x in links.all()] == ["revoked", "active"]
    assert links.revoke("no-such-id", now=NOW) is None


def test_a_token_for_a_site_no_longer_configured_is_refused(sharing: Settings) -> None:
    _, token = ShareLinks(sharing).create(site="b.test", view={}, days=7, creator="ann", now=NOW)
    fewer_sites = dataclasses.replace(sharing, sites=(SiteSettings("a.test"),))
    with pytest.raises(AccessDenied) as refused:
        ShareLinks(fewer_sites).read(token, now=NOW)
    assert refused.value.kind == "unknown-site"


def test_a_validly_signed_token_that_was_never_recorded_is_refused(sharing: Settings) -> None:
    token = make_share_token(secret_key(sharing), ShareGrant("made-up", "a.test", {"site": "a.test"}, 0, int(NOW) + 99))
    with pytest.raises(AccessDenied) as refused:
        ShareLinks(sharing).read(token, now=NOW)
    assert refused.value.kind == "unknown-link"


def test_a_token_signed_with_another_key_is_refused(sharing: Settings, tmp_path: Path) -> None:
    _, token = ShareLinks(sharing).create(site="a.test", view={}, days=7, creator="ann", now=NOW)
    rekeyed = dataclasses.replace(sharing, dashboard=DashboardSettings(secret_key="k" * 32))
    with pytest.raises(AccessDenied, match="damaged or was altered"):
        ShareLinks(rekeyed).read(token, now=NOW)


def test_the_generated_key_is_private_and_stable_and_a_short_configured_key_is_refused(sharing: Settings) -> None:
    key = secret_key(sharing)
    assert key == secret_key(sharing) and len(key) >= 32
    assert stat.S_IMODE(os.stat(Path(sharing.home) / "dashboard" / "secret.key").st_mode) == 0o600
    with pytest.raises(SettingsError, match=r"dashboard\.secret_key"):
        secret_key(dataclasses.replace(sharing, dashboard=DashboardSettings(secret_key="short")))


def test_a_view_is_parsed_from_a_query_string_and_checked(sharing: Settings) -> None:
    assert parse_view("range=30d&f_page=/pricing", site="a.test") == {
        "range": "30d",
        "f_page": "/pricing",
        "site": "a.test",
    }
    assert parse_view("", site="a.test") == {"site": "a.test", "range": "7d"}
    bad_views = ("range=30d&range=7d", "share=x", "site=b.test", "novalue", "f_page=" + "x" * 3000)
    for bad in (*bad_views, "page=/pricing", "range=forever", "range=custom&from=2026-01-01"):
        with pytest.raises(ValueError):
            parse_view(bad, site="a.test")
    with pytest.raises(ValueError, match="not configured"):
        ShareLinks(sharing).create(site="c.test", view={}, days=1, creator="ann", now=time.time())
