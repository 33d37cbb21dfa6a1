"""A share link's page may be framed by its site's ``embed_origins``, while it opens; no other page
may be, and no other site's origins (the browser's side is tests/e2e/test_dashboard_framing.py)."""

from __future__ import annotations

import dataclasses
import time

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from dashboard.auth import write_file_users
from dashboard.framing import FramingPolicy, share_embedders
from dashboard.passwords import hash_password
from dashboard.share_links import ShareLinks
from ops.cli import main
from tally.settings import DashboardUser, Settings, SettingsError, SiteSettings

SHOP = "https://shop.example"


@pytest.fixture
def embedding(settings: Settings) -> Settings:
    """The first site embeddable by SHOP, the second by nobody; a user who may see both."""
    first, second, *rest = settings.sites
    sites = (dataclasses.replace(first, embed_origins=(SHOP,)), second, *rest)
    user = DashboardUser("ana", hash_password("correct horse", n=settings.dashboard.password_scrypt_n), ("*",))
    write_file_users(settings, [user])
    return dataclasses.replace(settings, sites=sites)


def policy(settings: Settings, url: str) -> str:
    app = Starlette(routes=[Route("/{path:path}", lambda _: PlainTextResponse("page"))])
    framed = FramingPolicy(app, embedders=share_embedders(lambda: settings))
    return TestClient(framed).get(url).headers["content-security-policy"]


def link(settings: Settings, site: SiteSettings) -> tuple[str, str]:
    made, token = ShareLinks(settings).create(
        site=site.site_id, view={"range": "7d"}, days=1, creator="ana", now=time.time()
    )
    return made.link_id, token


def test_a_share_link_s_page_may_be_framed_by_its_site_s_origins_while_it_opens(embedding: Settings) -> None:
    link_id, token = link(embedding, embedding.sites[0])
    assert policy(embedding, f"/?share={token}") == f"frame-ancestors 'self' {SHOP}"
    assert policy(embedding, f"/?share={token}&embed=true") == f"frame-ancestors 'self' {SHOP}"
    # Not the dashboard's other pages, nor its assets, even with the token in their address.
    assert policy(embedding, "/") == "frame-ancestors 'self'"
    assert policy(embedding, f"/login?share={token}") == "frame-ancestors 'self'"
    assert policy(embedding, f"/static/app.js?share={token}") == "frame-ancestors 'self'"
    ShareLinks(embedding).revoke(link_id, now=time.time())
    assert policy(embedding, f"/?share={token}") == "frame-ancestors 'self'"  # revoked: framed by no one


def test_a_link_of_a_site_without_embed_origins_or_a_forged_token_adds_no_origin(embedding: Settings) -> None:
    _, token = link(embedding, embedding.sites[1])
    assert policy(embedding, f"/?share={token}") == "frame-ancestors 'self'"
    _, real = link(embedding, embedding.sites[0])
    forged = real[:-2] + ("AA" if not real.endswith("AA") else "BB")
    assert policy(embedding, f"/?share={forged}") == "frame-ancestors 'self'"
    assert policy(embedding, "/?share=%00%ff") == "frame-ancestors 'self'"


@pytest.mark.parametrize("origin", ["shop.example", "https://shop.example/page", "javascript:alert(1)", "*"])
def test_an_embed_origin_that_is_not_an_origin_is_refused_saying_what_to_write(origin: str) -> None:
    with pytest.raises(SettingsError, match=r"embed_origins.*e\.g\. https://www\.example\.com"):
        SiteSettings("shop.example", embed_origins=(origin,))


def test_tally_site_add_takes_embed_origins(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["site", "add", "x.example", "--domains", "x.example", "--embed-origins", "ftp://x.example"])
    assert done.value.code == 2
    assert "embed_origins: 'ftp://x.example' is not an origin" in capsys.readouterr().err
