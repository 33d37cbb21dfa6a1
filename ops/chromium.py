"""The Chromium ``scripts/install-browser.sh`` installs (Debian's ``chromium`` package; ``make test``
runs it), and the flags the browser tests and the dashboard benchmark launch it with, headless
through Playwright: no sandbox (containers rarely allow one), no GPU, and none of the browser's
own traffic (sync, updates, QUIC probes) beside the page's."""

from __future__ import annotations

from typing import Any

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


def launch_options() -> dict[str, Any]:
    """Playwright's keyword arguments to launch this Chromium with :data:`ARGS` (``chromium.launch``,
    ``chromium.launch_persistent_context``)."""
    return {"executable_path": EXECUTABLE, "args": list(ARGS)}
