"""Fuzzing the Stats API's ``POST /api/v2/query`` in-process: never a 5xx, every answer JSON.

The app is the API's own (:func:`api.app.create_app`) with a key for both of conf/test.yaml's
sites, over a home with no tables (an empty table answers zero). Bodies come from
tests/faults/payloads.py: Plausible v2 queries whose every part is sometimes text over the whole
of Unicode (lone surrogates sent as ``\\ud800`` escapes, NUL, bidi controls, non-characters),
any JSON or a number of 5,000 digits, filters nested up to 2,000 ``and``/``or`` levels deep,
and bodies that are not queries at all. CI runs a few hundred bodies; ``make test-long`` 10,000.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json

import pytest
from hypothesis import given
from starlette.testclient import TestClient

from api.app import create_app
from api.keys import create_key
from tally.settings import Settings
from tests.faults.payloads import OTHER_SITE, SITE, Request, stats_requests
from tests.support.fuzzing import SIZES, Findings, fuzz


@dataclasses.dataclass(frozen=True)
class StatsApi:
    client: TestClient
    key: str


@pytest.fixture(autouse=True)
def no_hourly_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ten thousand questions an hour and more: the fuzzer's key is never answered 429."""
    monkeypatch.setenv("TALLY_API__REQUESTS_PER_HOUR", str(10**9))


@pytest.fixture
def stats_api(settings: Settings) -> StatsApi:
    """The API over an empty home, with a key for both sites."""
    key, _ = create_key(settings, name="fuzz", sites=(SITE, OTHER_SITE), now=dt.datetime.now(dt.UTC))
    return StatsApi(TestClient(create_app(settings), raise_server_exceptions=False), key)


def answer_faults(status: int, text: str) -> list[str]:
    """What is wrong with an answer: not JSON, or not the shape its status promises."""
    try:
        answer = json.loads(text)
    except ValueError:
        return [f"status {status}, an answer that is not JSON: {text[:200]!r}"]
    if status == 200 and not isinstance(answer.get("results"), list):
        return [f"a 200 without results: {text[:200]!r}"]
    if status != 200 and not isinstance(answer.get("error"), str):
        return [f"status {status} without an error that says why: {text[:200]!r}"]
    return []


@pytest.mark.parametrize("examples", SIZES)
def test_no_stats_api_body_gets_a_server_error_and_every_answer_is_json(stats_api: StatsApi, examples: int) -> None:
    findings = Findings()
    headers = {"Authorization": f"Bearer {stats_api.key}"}

    @fuzz(examples)
    @given(request=stats_requests())
    def send(request: Request) -> None:
        response = stats_api.client.post(
            "/api/v2/query", content=request.body, headers=headers | {"Content-Type": request.content_type}
        )
        findings.note(request, response.status_code, response.text, answer_faults(response.status_code, response.text))

    send()
    print(f"\n{findings.summary()}")
    assert findings.statuses[200] and findings.statuses[400] and findings.statuses[403], findings.summary()
    findings.assert_no_faults()
