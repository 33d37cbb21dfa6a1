"""Where a client is, from its IP: the country always; region and city with the operator's city database.

Without ``geo.city_db``, the country comes from the IPv4 + IPv6 database shipped in the geoip2fast
package (no network). With it, the MaxMind DB file it names (GeoLite2-City, or DB-IP's
dbip-city-lite; downloaded by the operator) answers instead, for IPv4 and IPv6 alike: the country,
the region (ISO 3166-2, ``DE-BE``) and the city (its English name), all three from one source.
Private, reserved and unknown addresses have no location. The IP itself is never kept.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import maxminddb

from tally.settings import SettingsError

# geoip2fast's IPv4 + IPv6 file, in its wheel. Measured (geoip2fast 1.2.2): it loads in 0.2-0.35 s
# and adds 47 MiB to a worker, against 0.1 s and 27 MiB for the default IPv4-only file.
COUNTRY_DATA_FILE = "geoip2fast-ipv6.dat.gz"


@dataclass(frozen=True, slots=True)
class Location:
    """What is stored of where a client is. Each part is None when unknown."""

    country: str | None = None  # ISO 3166-1 alpha-2
    region: str | None = None  # ISO 3166-2 (DE-BE); a DB-IP database has no codes: its English name
    city: str | None = None  # English name


NOWHERE = Location()


@lru_cache(maxsize=1)
def _country_database() -> Any:
    from geoip2fast import GeoIP2Fast

    return GeoIP2Fast(verbose=False, geoip2fast_data_file=COUNTRY_DATA_FILE)


def _country_code(value: object) -> str | None:
    return value if isinstance(value, str) and len(value) == 2 and value.isalpha() else None


def _name(entry: object) -> str | None:
    names = entry.get("names") if isinstance(entry, dict) else None
    name = names.get("en") if isinstance(names, dict) else None
    return name if isinstance(name, str) and name else None


def location_of_record(record: object) -> Location:
    """A MaxMind DB city record (GeoIP2/GeoLite2-City or dbip-city-lite) -> :class:`Location`."""
    if not isinstance(record, dict):
        return NOWHERE
    country_entry = record.get("country")
    country = _country_code(country_entry.get("iso_code") if isinstance(country_entry, dict) else None)
    subdivisions = record.get("subdivisions")
    first = subdivisions[0] if isinstance(subdivisions, list) and subdivisions else None
    code = first.get("iso_code") if isinstance(first, dict) else None
    if isinstance(code, str) and code and country:
        region: str | None = f"{country}-{code}"
    else:
        region = _name(first)  # DB-IP Lite carries subdivision names only
    return Location(country, region, _name(record.get("city")))


class CityDatabase:
    """A MaxMind DB city database, opened once (memory-mapped, by the C reader when it is there)."""

    def __init__(self, path: Path) -> None:
        if not path.is_file():
            raise SettingsError(
                f"geo.city_db: {path!r} does not exist; download GeoLite2-City or dbip-city-lite there "
                '(docs/CONFIGURATION.md), or set geo.city_db to "" for the country only'
            )
        try:
            self._reader = maxminddb.open_database(str(path), maxminddb.MODE_AUTO)
        except (OSError, ValueError, maxminddb.InvalidDatabaseError) as e:
            raise SettingsError(f"geo.city_db: {path!r} is not a MaxMind DB (.mmdb) file ({e})") from e

    def locate(self, ip: str) -> Location:
        """The record's location, or :data:`NOWHERE` when the database has none or cannot read it."""
        try:
            return location_of_record(self._reader.get(ip))
        except (ValueError, maxminddb.InvalidDatabaseError):  # an IPv6 address in an IPv4 file; a damaged record
            return NOWHERE

    def close(self) -> None:
        self._reader.close()


_city_database: CityDatabase | None = None


def use_city_database(path: Path | None) -> None:
    """Answer every later lookup from the city database at ``path`` (``geo.city_db``; None: country only).

    Raises :class:`SettingsError` naming the setting when the file is missing or not a MaxMind DB.
    """
    global _city_database
    database = CityDatabase(path) if path else None
    if _city_database is not None:
        _city_database.close()
    _city_database = database
    location_of.cache_clear()


def _public(ip: str) -> str | None:
    """The address in canonical form (an IPv4-mapped IPv6 one as IPv4), or None if it is not public."""
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return str(address) if address.is_global else None


@lru_cache(maxsize=65536)  # a visitor's IP repeats for every event of the visit
def location_of(ip: str) -> Location:
    """Country, region and city of a client IP (IPv4 or IPv6); :data:`NOWHERE` for a private,
    reserved, malformed or unknown one."""
    address = _public(ip)
    if address is None:
        return NOWHERE
    if _city_database is not None:
        return _city_database.locate(address)
    try:
        code = _country_database().lookup(address).country_code
    except (ValueError, TypeError, AttributeError):
        return NOWHERE
    country = _country_code(code)
    return Location(country) if country else NOWHERE


def country_of(ip: str) -> str | None:
    """ISO 3166 alpha-2 code, or None for private, reserved or unknown addresses."""
    return location_of(ip).country
