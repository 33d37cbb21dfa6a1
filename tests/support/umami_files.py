"""Umami's website export written as Umami's export route writes it (umami-software/umami v3.1.0,
``src/app/api/websites/[websiteId]/export/route.ts``): seven files, each ``Papa.unparse`` of its
metric query's rows (header ``x,y``, CRLF between lines and none after the last, a cell quoted only
when it must be, a file of no rows 0 bytes), in a stored ZIP, answered as ``{"zip": "<base64>"}``;
for the import's tests and the dashboard's."""

from __future__ import annotations

import base64
import datetime as dt
import json
from pathlib import Path

FIRST, LAST = dt.date(2024, 1, 1), dt.date(2024, 1, 31)  # the range the export was asked for
# Each file's rows as Umami's queries give them, most first: x the value, y its distinct sessions
# (events.csv: the custom events of that name; an event without a name is written with x empty).
ROWS: dict[str, list[tuple[str, int]]] = {
    "events": [("signup", 42), ("download", 17), ("", 3)],
    "pages": [("/", 120), ("/pricing", 45), ("/blog/a,b", 12), ('/say-"hi"', 2)],
    "referrers": [("google.com", 60), ("news.ycombinator.com", 25)],
    "browsers": [("chrome", 80), ("firefox", 30), ("edge-chromium", 10)],
    "os": [("Windows 10", 50), ("Mac OS", 40), ("Android OS", 30)],
    "devices": [("laptop", 55), ("mobile", 30), ("desktop", 25), ("tablet", 10)],
    "countries": [("DE", 60), ("US", 50), ("FR", 10)],
}


def unparse(rows: list[tuple[str, int]]) -> str:
    """``Papa.unparse(rows, {header: true, skipEmptyLines: true})`` of ``{x, y}`` rows."""

    def cell(value: str | int) -> str:
        text = str(value)
        needs = any(c in text for c in ',"\r\n') or text != text.strip()
        return '"' + text.replace('"', '""') + '"' if needs else text

    if not rows:
        return ""
    return "\r\n".join(["x,y", *(f"{cell(x)},{cell(y)}" for x, y in rows)])


def export_files(rows: dict[str, list[tuple[str, int]]] = ROWS) -> dict[str, str | bytes]:
    return {f"{name}.csv": unparse(r) for name, r in rows.items()}


def answer_of(archive: Path, path: Path) -> Path:
    """The export route's answer for the ZIP at ``archive``: ``{"zip": "<base64>"}``."""
    path.write_text(json.dumps({"zip": base64.b64encode(archive.read_bytes()).decode()}))
    return path
