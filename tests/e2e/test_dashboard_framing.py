"""Another site cannot show the dashboard in a frame (clickjacking): checked in Chromium."""

from __future__ import annotations

import urllib.request
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
