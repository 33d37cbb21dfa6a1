"""The Chromium the setup installs (Debian's ``chromium`` package) and the flags the browser tests and
the dashboard benchmark launch it with, headless through Playwright: no sandbox (containers rarely
allow one), no GPU, and none of the browser's own traffic (sync, updates, QUIC probes) beside the
page's."""

from __future__ import annotations

EXECUTABLE = "/usr/bin/chromium"
ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-sync",
    "--disable-background-networking",
    "--disable-component-update",
)
