"""The running stack, as a user starts it (`tally up`), in its own home and ports."""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ops import chromium
from ops.stack import free_ports, stack_env
from tally.settings import PROJECT_ROOT

ARTIFACTS = PROJECT_ROOT / "test-artifacts"


@dataclass(frozen=True)
class RunningStack:
    env: dict[str, str]
    home: Path

    def tally(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tally", *args],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    @property
    def ingest_url(self) -> str:
        return f"http://127.0.0.1:{self.env['TALLY_INGEST__PORT']}"

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.env['TALLY_DASHBOARD__PORT']}"


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    home = tmp_path_factory.mktemp("e2e-home")
    running = RunningStack(stack_env(home), home)
    up = running.tally("up")
    assert up.returncode == 0, up.stderr
    try:
        yield running
    finally:
        running.tally("down")


@contextlib.contextmanager
def served_folder(root: Path) -> Iterator[str]:
    """Serve ``root`` over HTTP on a free loopback port (another origin than the stack's) while in
    the block; its base URL."""
    (port,) = free_ports(1)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(**chromium.launch_options())
        yield launched
        launched.close()
