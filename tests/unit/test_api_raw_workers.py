"""Raw questions in worker processes (api/raw_workers.py), through the API over HTTP: the same answers
as in the API's own threads, a question's error comes back as its 400, and a worker that dies is
a 503 with Retry-After, its slot given back, and new workers answer the next question."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from deltalake import write_deltalake
from starlette.testclient import TestClient

from api.app import create_app
from api.keys import create_key
from simulator.synthetic import synthetic_events
from tally.settings import Settings, load_settings
from tally.tables import RAW_PAGEVIEWS

SITE = "demo.tally.local"
TODAY = dt.datetime.now(dt.UTC).replace(hour=0, minute=0, second=0, microsecond=0)
FILTERED = {  # answered from raw events: a filter, visit metrics, a breakdown
    "site_id": SITE,
    "metrics": ["visitors", "visits", "pageviews", "bounce_rate"],
    "dimensions": ["visit:browser"],
    "filters": [["contains", "event:page", ["/"]]],
    "date_range": "7d",
}


@pytest.fixture
def events(settings: Settings) -> Settings:
    """A week of synthetic events in the test's own raw.pageviews."""
    table = synthetic_events(visits=300, start=TODAY - dt.timedelta(days=6), span=dt.timedelta(days=6), site_id=SITE)
    write_deltalake(settings.table_uri(RAW_PAGEVIEWS), table, partition_by=["event_date"])
    return settings


@pytest.fixture
def in_processes(events: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """The API with its raw questions in worker processes (the default outside the unit tier), its
    lifespan run, so the workers are stopped at the end."""
    monkeypatch.setenv("TALLY_API__RAW_IN_PROCESSES", "true")
    settings = load_settings()
    key, _ = create_key(settings, name="t", sites=(SITE,), now=dt.datetime.now(dt.UTC))
    with TestClient(create_app(settings)) as client:
        yield client, {"Authorization": f"Bearer {key}"}


def test_a_raw_question_answered_in_a_worker_equals_the_answer_in_the_apis_own_thread(
    events: Settings, in_processes: tuple[TestClient, dict[str, str]]
) -> None:
    client, headers = in_processes
    assert client.app.state.answering.workers is not None  # type: ignore[attr-defined]
    in_worker = client.post("/api/v2/query", json=FILTERED, headers=headers)
    assert in_worker.status_code == 200, in_worker.text
    key, _ = create_key(events, name="threads", sites=(SITE,), now=dt.datetime.now(dt.UTC))
    with TestClient(create_app(events)) as threads:  # the unit tier's setting: no workers
        assert threads.app.state.answering.workers is None  # type: ignore[attr-defined]
        in_thread = threads.post("/api/v2/query", json=FILTERED, headers={"Authorization": f"Bearer {key}"})
    assert in_worker.json()["results"] and in_worker.json()["results"] == in_thread.json()["results"]
    assert in_worker.json()["meta"] == in_thread.json()["meta"]


def test_a_question_refused_in_a_worker_is_its_400_naming_the_part(
    in_processes: tuple[TestClient, dict[str, str]],
) -> None:
    client, headers = in_processes
    # Parsed in the API, refused by the engine in the worker: a goal the site does not have.
    body = {**FILTERED, "filters": [["is", "event:goal", ["No such goal"]]]}
    refused = client.post("/api/v2/query", json=body, headers=headers)
    assert refused.status_code == 400, refused.text
    assert refused.json() == {"error": "goal 'No such goal' is not configured for this site", "part": "filters"}


def test_a_worker_that_dies_is_a_503_with_retry_after_and_new_workers_answer_the_next_question(
    in_processes: tuple[TestClient, dict[str, str]],
) -> None:
    client, headers = in_processes
    answering = client.app.state.answering  # type: ignore[attr-defined]
    assert client.post("/api/v2/query", json=FILTERED, headers=headers).status_code == 200
    workers = list(answering.workers._pool._processes.values())  # the warm pool's processes
    assert workers
    for worker in workers:
        os.kill(worker.pid, signal.SIGKILL)
    for worker in workers:
        worker.join(30)
    lost = client.post("/api/v2/query", json=FILTERED, headers=headers)
    assert lost.status_code == 503, lost.text
    assert int(lost.headers["retry-after"]) > 0 and "retry" in lost.json()["error"]
    assert answering.budget.held() == 0
    again = client.post("/api/v2/query", json=FILTERED, headers=headers)
    assert again.status_code == 200, again.text


def test_the_workers_end_when_the_api_process_is_killed(tmp_path: Path) -> None:
    """A worker's orphan watch: kill -9 of the process that started the pool ends its workers too."""
    script = (
        "import time\n"
        "from api.raw_workers import RawWorkers\n"
        "pool = RawWorkers(2)._current()\n"
        "while len(pool._processes) < 2: time.sleep(0.05)\n"
        "print(*pool._processes, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=tmp_path.parent)
    try:
        assert parent.stdout is not None
        workers = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(workers) == 2 and all(psutil.pid_exists(pid) for pid in workers)
    finally:
        parent.kill()
        parent.wait(30)
    _, alive = psutil.wait_procs([psutil.Process(pid) for pid in workers if psutil.pid_exists(pid)], timeout=15)
    assert not alive, f"workers still running after their API process was killed: {alive}"
