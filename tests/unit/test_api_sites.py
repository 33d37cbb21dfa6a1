"""The Stats API's site admin gate, in-process and without Kafka: who may manage sites, and what a
bad site body is told (tests/integration/test_sites_runtime.py writes sites through a real broker)."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest
from starlette.testclient import TestClient

from api.answering import Refused
from api.app import create_app
from api.keys import create_key
from api.sites import _site_of
from tally.settings import Settings, SiteSettings

NOW = dt.datetime(2026, 11, 25, 12, 0, tzinfo=dt.UTC)
NEW_SITE = {"site_id": "c.example", "domains": ["c.example"]}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_without_a_key_managing_sites_is_a_401(settings: Settings) -> None:
    client = TestClient(create_app(settings))
    assert client.get("/api/v1/sites").status_code == 401
    assert client.post("/api/v1/sites", json=NEW_SITE).status_code == 401


def test_a_read_key_may_not_manage_sites_and_is_told_to_create_an_admin_key(settings: Settings) -> None:
    key, _ = create_key(settings, name="reader", sites=("*",), now=NOW)
    client = TestClient(create_app(settings))
    for answer in (
        client.get("/api/v1/sites", headers=bearer(key)),
        client.post("/api/v1/sites", json=NEW_SITE, headers=bearer(key)),
        client.delete("/api/v1/sites/demo.tally.local", headers=bearer(key)),
    ):
        assert answer.status_code == 403 and "tally apikey create --admin" in answer.json()["error"]


def test_an_admin_key_gets_a_503_while_the_sites_topic_is_not_read(settings: Settings) -> None:
    key, _ = create_key(settings, name="admin", sites=(), now=NOW, admin=True)
    client = TestClient(create_app(settings))  # no lifespan: nothing follows the topic
    answer = client.get("/api/v1/sites", headers=bearer(key))
    assert answer.status_code == 503 and "retry later" in answer.json()["error"]


@pytest.mark.parametrize(
    ("body", "path_site", "part_of_message"),
    [
        ([1, 2], None, "JSON object"),
        ({"site_id": "c.example"}, None, '"domains"'),
        ({"site_id": "c.example", "domains": ["https://c.example/"]}, None, "not a host name"),
        ({**NEW_SITE, "salt_period": "year"}, None, "salt_period"),
        ({**NEW_SITE, "colour": "red"}, None, "unknown key"),
        (NEW_SITE, "d.example", "not the path's"),
    ],
)
def test_a_bad_site_body_is_a_400_that_names_what_to_fix(
    body: object, path_site: str | None, part_of_message: str
) -> None:
    with pytest.raises(Refused, match=part_of_message) as refused:
        _site_of(body, path_site)
    assert refused.value.status == 400


def test_the_openapi_schema_describes_the_site_admin_endpoints(settings: Settings) -> None:
    paths = TestClient(create_app(settings)).get("/openapi.json").json()["paths"]
    assert set(paths["/api/v1/sites"]) == {"get", "post"}
    assert set(paths["/api/v1/sites/{site_id}"]) == {"put", "delete"}
    site = paths["/api/v1/sites"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    fields = set(dataclasses.asdict(SiteSettings("x")))
    assert set(site["properties"]) == fields  # every field of a site, and no other
