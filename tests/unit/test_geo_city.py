"""Region and city from the operator's city database (``geo.city_db``), and the country of IPv6 clients.

The tests write their own tiny MaxMind DB file (``write_city_database``): the real GeoLite2-City and
dbip-city-lite files are the operator's download, under the operator's licence.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from mmdb_writer import MMDBWriter
from netaddr import IPSet

from archiver.tables import ArchiveTable, TableBatch
from ingest.app import create_app
from ingest.beacon import Beacon
from ingest.enrich import Client, RequestFacts, client_of, enrich
from ingest.geo import NOWHERE, CityDatabase, Location, location_of, location_of_record, use_city_database
from tally.settings import GeoSettings, Settings, SettingsError, load_settings
from tally.table_schemas import RAW_PAGEVIEWS_SCHEMA
from tally.tables import archiver_app_id

BEACON_ID = "0b9f7f2e-8f2a-4c1e-9a53-6f0b3c1d2e4f"
CHROME = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36"


def _record(country: str, subdivision: dict[str, object] | None = None, city: str | None = None) -> dict[str, object]:
    record: dict[str, object] = {"country": {"iso_code": country, "names": {"en": country}}}
    if subdivision is not None:
        record["subdivisions"] = [subdivision]
    if city is not None:
        record["city"] = {"names": {"en": city, "de": city + " (de)"}}
    return record


# network -> record, as GeoLite2-City shapes them; 185.1.2.0/24 as dbip-city-lite does (no subdivision codes).
NETWORKS: dict[str, dict[str, object]] = {
    "81.2.69.0/24": _record("GB", {"iso_code": "ENG", "names": {"en": "England"}}, "London"),
    "89.160.20.0/24": _record("SE", {"iso_code": "E", "names": {"en": "Östergötland County"}}, "Linköping"),
    "2.125.160.0/24": _record("GB"),  # a country, nothing finer
    "185.1.2.0/24": _record("DE", {"names": {"en": "Bavaria"}}, "Munich"),
    "2a02:8108::/32": _record("DE", {"iso_code": "BE", "names": {"en": "Land Berlin"}}, "Berlin"),
    "2001:4860::/32": _record("US", {"iso_code": "CA", "names": {"en": "California"}}, "Mountain View"),
}


def write_city_database(path: Path, networks: dict[str, dict[str, object]] = NETWORKS) -> Path:
    """A small IPv6 MaxMind DB city database (IPv4 networks in its IPv4-mapped part) at ``path``."""
    writer = MMDBWriter(ip_version=6, ipv4_compatible=True, database_type="GeoLite2-City", languages=["en"])
    for network, record in networks.items():
        writer.insert_network(IPSet([network]), record)
    writer.to_db_file(str(path))
    return path


@pytest.fixture
def city_db(tmp_path: Path) -> Iterator[Path]:
    """Lookups answered by a test city database for the test, by geoip2fast's again after it."""
    path = write_city_database(tmp_path / "city.mmdb")
    use_city_database(path)
    client_of.cache_clear()  # clients cache their location
    try:
        yield path
    finally:
        use_city_database(None)
        client_of.cache_clear()


@pytest.mark.parametrize(
    ("ip", "location"),
    [
        ("81.2.69.142", Location("GB", "GB-ENG", "London")),
        ("89.160.20.112", Location("SE", "SE-E", "Linköping")),
        ("2.125.160.216", Location("GB", None, None)),
        ("185.1.2.3", Location("DE", "Bavaria", "Munich")),  # DB-IP Lite: the subdivision's name
        ("2a02:8108:1:2::3", Location("DE", "DE-BE", "Berlin")),
        ("2001:4860:4860::8888", Location("US", "US-CA", "Mountain View")),
        ("::ffff:81.2.69.142", Location("GB", "GB-ENG", "London")),  # IPv4-mapped, as dual-stack sockets give it
        ("8.8.8.8", NOWHERE),  # public, but not in this database
    ],
)
def test_a_city_database_gives_country_iso_region_and_english_city_for_ipv4_and_ipv6(
    city_db: Path, ip: str, location: Location
) -> None:
    assert location_of(ip) == location


@pytest.mark.parametrize(
    "ip", ["10.1.2.3", "192.168.0.1", "127.0.0.1", "::1", "fe80::1", "fc00::1", "203.0.113.7", "", "not an ip", "1.2.3"]
)
def test_private_reserved_and_malformed_addresses_have_no_location_and_never_raise(city_db: Path, ip: str) -> None:
    assert location_of(ip) == NOWHERE


def test_without_a_city_database_ipv6_clients_get_a_country_and_nobody_a_region_or_city() -> None:
    use_city_database(None)
    assert location_of("2a00:1450:4001:82a::200e") == Location("DE")  # geoip2fast's IPv4 + IPv6 file
    assert location_of("81.2.69.142") == Location("GB")
    assert location_of("::1") == NOWHERE


def test_a_damaged_or_odd_record_gives_what_it_can_and_never_raises() -> None:
    assert location_of_record(None) == NOWHERE
    assert location_of_record({"country": "DE"}) == NOWHERE
    assert location_of_record({"country": {"iso_code": "DEU"}, "city": {"names": {"en": "Berlin"}}}) == Location(
        None, None, "Berlin"
    )
    assert location_of_record({"country": {"iso_code": "FR"}, "subdivisions": [], "city": {"names": {}}}) == (
        Location("FR")
    )


def test_a_missing_city_database_is_a_startup_error_naming_the_setting(tmp_path: Path) -> None:
    missing = tmp_path / "GeoLite2-City.mmdb"
    with pytest.raises(SettingsError, match=r"geo\.city_db: .*GeoLite2-City\.mmdb.* does not exist"):
        CityDatabase(missing)
    with pytest.raises(SettingsError, match=r"geo\.city_db"):
        create_app(Settings(home=str(tmp_path), geo=GeoSettings(city_db=str(missing))))


def test_a_file_that_is_no_maxmind_db_is_a_startup_error_naming_the_setting(tmp_path: Path) -> None:
    bogus = tmp_path / "city.mmdb"
    bogus.write_bytes(b"not a database")
    with pytest.raises(SettingsError, match=r"geo\.city_db: .* is not a MaxMind DB"):
        CityDatabase(bogus)


def test_ingest_opens_the_configured_city_database_and_stores_region_and_city(tmp_path: Path) -> None:
    path = write_city_database(tmp_path / "city.mmdb")
    try:
        create_app(Settings(home=str(tmp_path), geo=GeoSettings(city_db=str(path))))
        client = Client("2a02:8108:9::1", CHROME, b"salt")
        assert (client.country, client.region, client.city) == ("DE", "DE-BE", "Berlin")
    finally:
        use_city_database(None)


def test_enriched_events_carry_region_and_city(city_db: Path) -> None:
    beacon = msgspec.convert({"id": BEACON_ID, "s": "a.com", "u": "https://a.com/", "te": 1, "ts": 1}, Beacon)
    event = enrich(beacon, RequestFacts("81.2.69.142", CHROME, 2), salt=b"s")
    assert (event.country, event.region, event.city) == ("GB", "GB-ENG", "London")


def test_a_relative_city_db_is_taken_from_the_project_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TALLY_GEO__CITY_DB", "geo/GeoLite2-City.mmdb")
    path = load_settings().geo.city_db_path
    assert path is not None and path.is_absolute() and path.parts[-2:] == ("geo", "GeoLite2-City.mmdb")
    assert GeoSettings().city_db_path is None


def test_an_ipv4_only_database_gives_ipv6_clients_no_location(tmp_path: Path) -> None:
    writer = MMDBWriter(ip_version=4, database_type="GeoLite2-City")
    writer.insert_network(IPSet(["81.2.69.0/24"]), NETWORKS["81.2.69.0/24"])
    writer.to_db_file(str(tmp_path / "v4.mmdb"))
    database = CityDatabase(tmp_path / "v4.mmdb")
    assert database.locate("81.2.69.142") == Location("GB", "GB-ENG", "London")
    assert database.locate("2a02:8108::1") == NOWHERE
    database.close()


def test_a_raw_table_written_before_region_and_city_takes_them_on_the_next_append(tmp_path: Path) -> None:
    uri = str(tmp_path / "raw" / "pageviews")
    old_schema = pa.schema([f for f in RAW_PAGEVIEWS_SCHEMA if f.name not in ("region", "city")])
    row: dict[str, object] = {
        "event_id": "e0",
        "type": "pageview",
        "site_id": "a.com",
        "url": "https://a.com/",
        "hostname": "a.com",
    }
    row |= {"path": "/", "ts_event": 1, "ts_sent": 1, "ts_received": 1, "event_time": 1, "visitor_id": "v"}
    row |= {"country": "GB", "event_date": dt.date(2026, 3, 10)}
    older = TableBatch()
    older.add(row, "pageviews", 0, 0)
    ArchiveTable(uri, old_schema, "event_date").append(older)
    newer = TableBatch()
    newer.add(row | {"event_id": "e1", "region": "GB-ENG", "city": "London"}, "pageviews", 0, 1)
    table = ArchiveTable(uri, RAW_PAGEVIEWS_SCHEMA, "event_date")  # the archiver, restarted on the new schema
    assert table.next_offset("pageviews", 0) == 1
    # At start, before any new event: readers asking for the new columns find them (null).
    assert DeltaTable(uri).to_pyarrow_table(columns=["event_id", "region", "city"]).to_pylist() == [
        {"event_id": "e0", "region": None, "city": None}
    ]
    assert DeltaTable(uri).transaction_version(archiver_app_id("pageviews", 0)) == 1  # offsets as they were
    table.append(newer)
    stored = DeltaTable(uri).to_pyarrow_table(columns=["event_id", "country", "region", "city"]).sort_by("event_id")
    assert stored.to_pylist() == [
        {"event_id": "e0", "country": "GB", "region": None, "city": None},
        {"event_id": "e1", "country": "GB", "region": "GB-ENG", "city": "London"},
    ]
    assert {"region", "city"} <= set(DeltaTable(uri).schema().to_arrow().names)
