"""Another site cannot show the dashboard in a frame (clickjacking), but a site's own pages may embed its
share links (``sites[].embed_origins``): checked in Chromium."""

from __future__ import annotations

import re
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import RunningStack, served_folder


@pytest.mark.parametrize("path", ["/", "/login", "/_stcore/health"])
def test_every_dashboard_response_says_only_the_dashboard_may_frame_it(stack: RunningStack, path: str) -> None:
    with urllib.request.urlopen(stack.dashboard_url + path, timeout=30) as response:
        headers = response.headers
    assert headers["Content-Security-Policy"] == "frame-ancestors 'self'"
    assert headers["X-Frame-Options"] in ("SAMEORIGIN", "DENY")


def test_a_page_of_another_origin_cannot_frame_the_dashboard(stack: RunningStack, browser: Any, tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text(
        f'<html><body><iframe id="d" src="{stack.dashboard_url}/"></iframe></body></html>'
    )
    with served_folder(tmp_path) as attacker:
        page = browser.new_page()
        try:
            page.goto(attacker + "/index.html")
            # Chromium refuses the document: the frame shows its own error page, not the dashboard.
            for _ in range(150):  # Playwright delivers frame events only while it is called: wait in the page
                if len(page.frames) == 2 and page.frames[1].url.startswith("chrome-error://"):
                    break
                page.wait_for_timeout(200)
            assert [frame.url.split("/")[0] for frame in page.frames[1:]] == ["chrome-error:"], page.frames
        finally:
            page.close()


def test_a_share_link_is_framed_compact_by_its_site_s_embed_origins_and_no_other_page_is(
    stack: RunningStack, browser: Any, tmp_path: Path
) -> None:
    site = f"embed-{uuid.uuid4().hex[:8]}.example"
    with served_folder(tmp_path) as origin:
        added = stack.tally("site", "add", site, "--domains", site, "--embed-origins", origin)
        assert added.returncode == 0, added.stderr
        made = stack.tally("share", "create", "--site", site, "--view", "range=today", "--days", "1")
        assert made.returncode == 0, made.stdout + made.stderr
        found = re.search(r"https?://\S+share=\S+", made.stdout)
        assert found, made.stdout
        shared = found[0]
        # The share link's page names the site's origin beside 'self'; the dashboard's other pages do not.
        assert _policy_within(shared, f"frame-ancestors 'self' {origin}", seconds=20)  # the dashboard follows the site
        with urllib.request.urlopen(stack.dashboard_url + "/", timeout=30) as response:
            assert response.headers["Content-Security-Policy"] == "frame-ancestors 'self'"
        (tmp_path / "index.html").write_text(
            f'<html><body><iframe id="shared" width="900" height="700" src="{shared}&amp;embed=true"></iframe>'
            f'<iframe id="plain" src="{stack.dashboard_url}/"></iframe></body></html>'
        )
        page = browser.new_page()
        try:
            page.goto(origin + "/index.html")
            embedded = page.frame_locator("#shared")
            embedded.locator("text=Figures as of").wait_for(timeout=60000)  # the shared view, drawn in the frame
            assert embedded.locator(f"text=Tally · {site}").count() == 1
            assert embedded.locator("[data-testid=stSidebar]").is_hidden()  # compact: no sidebar
            for _ in range(150):
                if any(f.url.startswith("chrome-error://") for f in page.frames):
                    break
                page.wait_for_timeout(200)
            assert [f.url.split("/")[0] for f in page.frames[1:]].count("chrome-error:") == 1, page.frames
        finally:
            page.close()


def _policy_within(url: str, expected: str, *, seconds: float) -> bool:
    """Whether ``url``'s framing policy is ``expected`` within ``seconds`` (the dashboard process
    follows a site added at runtime within seconds)."""
    deadline = time.monotonic() + seconds
    while True:
        with urllib.request.urlopen(url, timeout=30) as response:
            if response.headers["Content-Security-Policy"] == expected:
                return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
