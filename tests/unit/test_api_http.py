"""The Stats API's gate, over HTTP in-process: keys, the hourly limit, body size and JSON, before any table is
read; and the budget of raw questions, with the engine standing in."""

from __future__ import annotations

import dataclasses
import datetime as dt
import threading

import duckdb
import pytest
from starlette.testclient import TestClient

from api import answering
from api.app import create_app
from api.keys import create_key
from query.engine import Answer
from query.spec import Query
from tally.settings import Settings

SITE = "demo.tally.local"
QUERY = {"site_id": SITE, "metrics": ["pageviews"], "date_range": "7d"}


@pytest.fixture(autouse=True)
def small_api_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two requests an hour per key and bodies of 2 KiB at most, so each limit is reached in a few requests."""
    monkeypatch.setenv("TALLY_API__REQUESTS_PER_HOUR", "2")
    monkeypatch.setenv("TALLY_API__MAX_BODY_BYTES", "2048")


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


# --- the budget of raw questions (api/budget.py) -------------------------------------------------

HEAVY = {**QUERY, "dimensions": ["visit:country", "visit:browser"], "filters": [["matches", "event:page", ["^/docs"]]]}
LIGHT = {**QUERY, "filters": [["is", "visit:country", ["DE"]]]}  # a raw question too, of another key


@pytest.fixture
def budgeted(settings: Settings) -> Settings:
    """Three raw slots of 1 GiB, two a key, no wait: a refusal is at once."""
    api = dataclasses.replace(
        settings.api, requests_per_hour=1000, raw_slots=3, raw_slots_per_key=2, raw_memory="3g", raw_wait_seconds=0.0
    )
    return dataclasses.replace(settings, api=api)


class HeldQuestions:
    """The engine, standing in for it: a heavy question runs until :meth:`release`; others answer at once."""

    def __init__(self) -> None:
        self.started = threading.Semaphore(0)
        self.released = threading.Event()

    def run(self, query: Query, sources: object) -> Answer:
        if query.filters and query.filters[0].op == "matches":
            self.started.release()
            assert self.released.wait(60), "the test never released the heavy questions"
        return Answer([], {"source": "raw"})

    def release(self) -> None:
        self.released.set()


def test_a_key_holding_its_share_of_raw_questions_gets_429_while_another_keys_is_answered(
    budgeted: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    held = HeldQuestions()
    monkeypatch.setattr(answering, "run", held.run)
    app = create_app(budgeted)
    client = TestClient(app)
    now = dt.datetime.now(dt.UTC)
    heavy, _ = create_key(budgeted, name="heavy", sites=(SITE,), now=now)
    light, _ = create_key(budgeted, name="light", sites=(SITE,), now=now)
    heavy_headers, light_headers = {"Authorization": f"Bearer {heavy}"}, {"Authorization": f"Bearer {light}"}
    running: list[int] = []

    def ask_heavy() -> None:
        running.append(client.post("/api/v2/query", json=HEAVY, headers=heavy_headers).status_code)

    threads = [threading.Thread(target=ask_heavy) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        for _ in threads:  # both of the heavy key's questions are running, holding its two slots
            assert held.started.acquire(timeout=60)
        third = client.post("/api/v2/query", json=HEAVY, headers=heavy_headers)
        assert third.status_code == 429 and int(third.headers["retry-after"]) > 0
        assert "api.raw_slots_per_key" in third.json()["error"]
        other = client.post("/api/v2/query", json=LIGHT, headers=light_headers)
        assert other.status_code == 200, other.text
        views = client.post("/api/v2/query", json=QUERY, headers=heavy_headers)
        assert views.status_code == 200, "a question the views answer takes no slot"
    finally:
        held.release()
        for thread in threads:
            thread.join(60)
    assert running == [200, 200] and app.state.answering.budget.held() == 0


def test_when_every_raw_slot_is_held_a_raw_question_gets_503_with_retry_after(budgeted: Settings) -> None:
    client, key = client_and_key(budgeted)
    budget = client.app.state.answering.budget  # type: ignore[attr-defined]
    with budget.hold("one"), budget.hold("one"), budget.hold("two"):  # other keys' questions running
        busy = client.post("/api/v2/query", json=LIGHT, headers={"Authorization": f"Bearer {key}"})
    assert busy.status_code == 503 and int(busy.headers["retry-after"]) > 0
    assert "api.raw_slots" in busy.json()["error"]


def test_a_raw_question_past_its_slots_memory_is_a_400_that_says_so_and_gives_its_slot_back(
    budgeted: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    def out_of_memory(query: Query, sources: object) -> Answer:
        raise duckdb.OutOfMemoryException("Out of Memory Error: could not allocate block")

    monkeypatch.setattr(answering, "run", out_of_memory)
    client, key = client_and_key(budgeted)
    answer = client.post("/api/v2/query", json=HEAVY, headers={"Authorization": f"Bearer {key}"})
    assert answer.status_code == 400, answer.text
    assert answer.json() == {
        "error": "this question needs more than 1024MiB of memory: narrow the range or the dimensions",
        "part": "body",
    }
    assert client.app.state.answering.budget.held() == 0  # type: ignore[attr-defined]


def test_a_raw_question_that_fails_unexpectedly_gives_its_slot_back(
    budgeted: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(query: Query, sources: object) -> Answer:
        raise RuntimeError("a bug half way through a question")

    monkeypatch.setattr(answering, "run", broken)
    app = create_app(budgeted)
    client = TestClient(app, raise_server_exceptions=False)
    key, _ = create_key(budgeted, name="t", sites=(SITE,), now=dt.datetime.now(dt.UTC))
    for _ in range(3):  # more than the key's share: each one gave its slot back
        assert client.post("/api/v2/query", json=HEAVY, headers={"Authorization": f"Bearer {key}"}).status_code == 500
    assert app.state.answering.budget.held() == 0
