"""The words of Umami's website export, as Umami writes it (``GET /api/websites/{id}/export``,
``src/app/api/websites/[websiteId]/export/route.ts`` in umami-software/umami v3.1.0;
docs/IMPORT-EXPORT.md).

The route answers ``{"zip": "<base64>"}``: a ZIP (stored) of seven CSV files, each of two columns,
``x`` a value and ``y`` its figure over the whole range the export was asked for, the top 500 values
by ``y``. There are no dates in it. ``y`` is a count of distinct sessions (Umami's visitor: a hash
salted monthly) in every file but ``events.csv``, where it counts the custom events of that name.
"""

from __future__ import annotations

# Each file of the export (``<name>.csv``) and what its ``x`` is.
FILES: dict[str, str] = {
    "events": "the custom event's name",
    "pages": "the page's path (url_path)",
    "referrers": "the referrer's domain, www. taken off (visits from the site itself and direct ones are left out)",
    "browsers": "the browser, as Umami names it (chrome, firefox, edge-chromium, ios, …)",
    "os": "the operating system, as Umami names it (Windows 10, Mac OS, Android OS, …)",
    "devices": "the device (desktop, laptop, mobile, tablet)",
    "countries": "the country, ISO 3166-1 alpha-2",
}
# The one file whose figure counts events, not visitors.
EVENTS_FILE = "events"
HEADER = ("x", "y")
# Umami's metric queries end with ``limit 500``: a file of that many rows is probably cut there.
ROW_LIMIT = 500
