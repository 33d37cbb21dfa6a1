"""What a key learns of sites outside its scope: nothing. Every body for such a site gets the same 403,
before its dates, its filters or anything else of it is read; and no body nests filters without bound."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from api.app import create_app
from api.keys import create_key
from tally.settings import Settings, SiteSettings, load_settings

MINE, THEIRS, NOWHERE = "demo.tally.local", "kolkata.example", "nowhere.example"


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> TestClient:
    monkeypatch.setenv("TALLY_HOME", str(tmp_path))
    monkeypatch.setenv("TALLY_ENV", "test")
    loaded = load_settings()
    settings: Settings = dataclasses.replace(
        loaded, sites=(*loaded.sites, SiteSettings(THEIRS, domains=(THEIRS,), timezone="Asia/Kolkata"))
    )
    key, _ = create_key(settings, name="t", sites=(MINE,), now=dt.datetime.now(dt.UTC))
    return TestClient(create_app(settings), headers={"Authorization": f"Bearer {key}"})


BODIES: list[dict[str, Any]] = [
    {"metrics": ["visitors"], "date_range": "7d"},
    {"metrics": ["visitors"], "date_range": ["2020-01-01", "2026-12-31"]},  # over 400 days
    {"metrics": ["visitors"], "date_range": ["2026-11-30T23:00:00", "2026-12-01T01:00:00"]},  # local wall clock
    {"metrics": ["nonsense"], "date_range": "7d"},
    {"metrics": ["visitors"], "date_range": "7d", "filters": [["is", "nowhere:dimension", ["x"]]]},
]


@pytest.mark.parametrize("body", BODIES)
def test_every_body_for_a_site_outside_the_key_s_scope_gets_the_same_403(client: TestClient, body: Any) -> None:
    answers = {site: client.post("/api/v2/query", json={"site_id": site, **body}) for site in (THEIRS, NOWHERE)}
    assert {site: a.status_code for site, a in answers.items()} == {THEIRS: 403, NOWHERE: 403}
    said = {a.json()["error"].replace(site, "SITE") for site, a in answers.items()}
    assert said == {"this API key may not read site 'SITE'"}


def test_filters_nested_past_the_cap_are_a_400_that_names_it(client: TestClient) -> None:
    nested: Any = ["is", "event:page", ["/"]]
    for _ in range(450):
        nested = ["and", [nested]]
    answer = client.post(
        "/api/v2/query", json={"site_id": MINE, "metrics": ["visitors"], "date_range": "7d", "filters": [nested]}
    )
    assert answer.status_code == 400, answer.text
    assert "nest at most 16 deep" in answer.json()["error"]
    shallow: Any = ["is", "event:page", ["/"]]
    for _ in range(14):
        shallow = ["not", shallow] if len(shallow) == 3 else ["and", [shallow]]
    assert (
        client.post(
            "/api/v2/query", json={"site_id": MINE, "metrics": ["visitors"], "date_range": "7d", "filters": [shallow]}
        ).status_code
        == 200
    )
