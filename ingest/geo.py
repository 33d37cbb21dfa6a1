"""Country from IP with the offline database shipped in the geoip2fast package (no network)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any


@lru_cache(maxsize=1)
def _database() -> Any:
    from geoip2fast import GeoIP2Fast

    return GeoIP2Fast(verbose=False)


@lru_cache(maxsize=65536)  # a visitor's IP repeats for every event of the visit
def country_of(ip: str) -> str | None:
    """ISO 3166 alpha-2 code, or None for private, reserved or unknown addresses."""
    try:
        code = _database().lookup(ip).country_code
    except (ValueError, TypeError, AttributeError):
        return None
    return code if isinstance(code, str) and len(code) == 2 and code.isalpha() else None
