"""The Stats API's gate, over HTTP in-process: keys, the hourly limit, body size and JSON, before any table is read."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from api.app import create_app
from api.keys import create_key
from tally.settings import Settings, load_settings

SITE = "demo.tally.local"
QUERY = {"site_id": SITE, "metrics": ["pageviews"], "date_range": "7d"}


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("TALLY_HOME", str(tmp_path))
    monkeypatch.setenv("TALLY_ENV", "test")
    loaded = load_settings()
    return dataclasses.replace(loaded, api=dataclasses.replace(loaded.api, requests_per_hour=2, max_body_bytes=2048))


def client_and_key(settings: Settings) -> tuple[TestClient, str]:
    key, _ = create_key(settings, name="t", sites=(SITE,), now=dt.datetime.now(dt.UTC))
    return TestClient(create_app(settings)), key


def test_no_key_is_a_401_that_says_how_to_send_one(settings: Settings) -> None:
    client, _ = client_and_key(settings)
    answer = client.post("/api/v2/query", json=QUERY)
    assert answer.status_code == 401 and "Authorization: Bearer" in answer.json()["error"]
    assert client.post("/api/v2/query", json=QUERY, headers={"Authorization": "Basic abc"}).status_code == 401


def test_past_the_hourly_limit_the_answer_is_429_with_retry_after(settings: Settings) -> None:
    client, key = client_and_key(settings)
    headers = {"Authorization": f"Bearer {key}"}
    assert [client.post("/api/v2/query", json=QUERY, headers=headers).status_code for _ in range(2)] == [200, 200]
    limited = client.post("/api/v2/query", json=QUERY, headers=headers)
    assert limited.status_code == 429 and 0 < int(limited.headers["retry-after"]) <= 3600


def test_bodies_too_large_or_not_json_are_refused_clearly(settings: Settings) -> None:
    client, key = client_and_key(settings)
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    big = client.post("/api/v2/query", content=b" " * 4096, headers=headers)
    assert big.status_code == 413 and "2048 bytes" in big.json()["error"]
    bad = client.post("/api/v2/query", content=b"\xff\xfe{", headers=headers)
    assert bad.status_code == 400 and bad.json()["error"] == "the request body is not valid JSON"


def test_a_query_over_empty_tables_answers_zero_not_an_error(settings: Settings) -> None:
    client, key = client_and_key(settings)
    answer = client.post("/api/v2/query", json=QUERY, headers={"Authorization": f"Bearer {key}"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["results"] == [{"dimensions": [], "metrics": [0]}]
