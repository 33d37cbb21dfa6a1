"""Fuzzing the running ingest endpoint: no 5xx, and every refusal findable in the dead letters.

Two fuzzers against a real ingest process (its own topics on the session's broker, so the
dead letters counted are the fuzzers' only):

- schemathesis, from the served OpenAPI spec (all operations, positive and negative data);
- hypothesis, with bodies from ``tests/faults/payloads.py`` (beacons, mutated beacons, batches,
  any JSON, any bytes, oversized bodies, wrong content types; text over the whole of Unicode).
  Every refusal the responses announce must be a dead letter on the rejected topic: whole-body
  refusals with the body as payload (cut as ingest/kept_payload.py cuts it), refused events
  findable by their event id.

CI runs short versions; ``make test-long`` runs >= 10k cases with ``tests/faults/test_fuzz_parsers.py``.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.kept_payload import cut_text, kept_payload
from ops import broker
from ops.processes import Supervisor
from ops.stack import free_ports, services
from tally.deadletter import MAX_PAYLOAD_BYTES, DeadLetter
from tally.settings import Settings
from tests.faults.payloads import Request, requests
from tests.faults.stack import settings_from
from tests.integration.conftest import wait_for
from tests.integration.kafka_reader import read_topic

CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"
WHOLE_BODY = frozenset({"malformed_json", "empty_batch", "batch_too_large", "body_too_large", "unsupported_media_type"})


@dataclass(frozen=True)
class FuzzTarget:
    url: str
    settings: Settings


@pytest.fixture(scope="module")
def target(settings: Settings, kafka: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzTarget]:
    """An ingest process of its own, writing to topics of its own."""
    home, run = tmp_path_factory.mktemp("fuzz-home"), uuid.uuid4().hex[:8]
    port, metrics_port = free_ports(2)
    env = {
        "TALLY_HOME": str(home),
        "TALLY_INGEST__PORT": str(port),
        "TALLY_INGEST__METRICS_PORT": str(metrics_port),
        "TALLY_KAFKA__PAGEVIEWS_TOPIC": f"fuzz-pageviews-{run}",
        "TALLY_KAFKA__REJECTED_TOPIC": f"fuzz-rejected-{run}",
    }
    with settings_from(env) as own:
        broker.ensure_topics(own)
        supervisor = Supervisor(own.home_dir)
        supervisor.start(services(own, env)["ingest"])
    try:
        yield FuzzTarget(f"http://127.0.0.1:{own.ingest.port}", own)
    finally:
        supervisor.stop("ingest")


def dead_letters(target: FuzzTarget) -> list[DeadLetter]:
    return [
        DeadLetter.from_json(v)
        for _, v in read_topic(target.settings.kafka.servers, target.settings.kafka.rejected_topic, timeout=60)
    ]


def refusals_counted(target: FuzzTarget) -> int:
    """Events refused so far, by the endpoint's own Prometheus counter (every outcome but accepted)."""
    text = httpx.get(f"http://127.0.0.1:{target.settings.ingest.metrics_port}/metrics").text
    return int(
        sum(
            float(v)
            for outcome, v in re.findall(r'tally_ingest_events_total\{outcome="(\w+)"\} (\S+)', text)
            if outcome != "accepted"
        )
    )


def run_schemathesis(target: FuzzTarget, examples: int, report: Path) -> int:
    """Run schemathesis against the served spec; return the number of test cases it generated."""
    command = [sys.executable, "-m", "schemathesis.cli", "run", f"{target.url}/openapi.json", "--url", target.url]
    command += ["--checks", CHECKS, "--max-examples", str(examples), "--seed", "7", "--no-color"]
    command += ["--report", "ndjson", "--report-ndjson-path", str(report)]
    run = subprocess.run(
        command,
        cwd=report.parent,  # schemathesis keeps a cache in ./.schemathesis: not in the repository
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert run.returncode == 0, run.stdout[-4000:]
    events = [json.loads(line) for line in report.read_text().splitlines()]
    return sum(len(e["ScenarioFinished"]["recorder"].get("cases", {})) for e in events if "ScenarioFinished" in e)


@pytest.mark.parametrize("examples", [150, pytest.param(2500, marks=pytest.mark.long)], ids=["short", "long"])
def test_schemathesis_finds_no_server_error_and_every_refusal_is_a_dead_letter(
    target: FuzzTarget, examples: int, tmp_path: Path
) -> None:
    letters_before = len(dead_letters(target))
    refused_before = refusals_counted(target)
    cases = run_schemathesis(target, examples, tmp_path / "schemathesis.ndjson")
    print(f"\nschemathesis: {cases} test cases, 0 failures")
    refused = refusals_counted(target) - refused_before
    assert refused > 50, "the fuzzer should have produced many invalid requests"
    wait_for(
        lambda: len(dead_letters(target)) - letters_before == refused, 60, f"{refused} dead letters, one per refusal"
    )


def kept_forms(body: bytes) -> tuple[bytes, ...]:
    """What a dead letter may keep of a body refused whole: the body cut as JSON, or cut as text
    when it nests too deep to decode on the server's stack (deeper than this test's)."""
    as_text = cut_text(body.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
    return tuple(dict.fromkeys([kept_payload(body)[:MAX_PAYLOAD_BYTES], as_text[:MAX_PAYLOAD_BYTES]]))


@dataclass
class Expected:
    """The dead letters the responses announced."""

    total: int = 0
    kinds: Counter[str] = field(default_factory=Counter)  # of whole-body refusals and single events
    payloads: Counter[tuple[bytes, ...]] = field(default_factory=Counter)  # whole-body refusals: kept_forms
    event_ids: set[str] = field(default_factory=set)  # ids of the items of wholly refused requests
    cases: int = 0
    server_errors: list[str] = field(default_factory=list)

    def note(self, request: Request, status: int, answer: dict[str, object]) -> None:
        self.cases += 1
        if status >= 500:
            self.server_errors.append(f"{status} for {request!r}")
            return
        kind = str(answer.get("error", ""))
        if 400 <= status < 500 and kind in WHOLE_BODY:
            self.total += 1
            self.kinds[kind] += 1
            if kind != "body_too_large":  # whose head is what had arrived when ingest stopped reading: any length
                self.payloads[kept_forms(request.body)] += 1
            return
        rejected = answer.get("rejected")
        refused = len(request.items) if status >= 400 else len(rejected) if isinstance(rejected, list) else 0
        self.total += refused
        if status >= 400 and not request.is_batch:
            self.kinds[kind] += 1
        if status >= 400:  # every item refused (a 202 does not say which of a batch's items were)
            self.event_ids |= {i["id"] for i in request.items if isinstance(i, dict) and isinstance(i.get("id"), str)}


def _substrings(text: str, event_id: str) -> set[str]:
    """The forms of ``event_id`` that occur in ``text``."""
    return {form for form in (event_id, json.dumps(event_id)[1:-1], event_id.lower()) if form in text}


def _payload(letter: DeadLetter) -> bytes:
    return base64.b64decode(letter.payload_b64) if letter.payload_b64 else (letter.payload or "").encode()


@pytest.mark.parametrize("examples", [300, pytest.param(4000, marks=pytest.mark.long)], ids=["short", "long"])
def test_hypothesis_bodies_get_no_server_error_and_every_refusal_is_findable_as_a_dead_letter(
    target: FuzzTarget, examples: int
) -> None:
    before = len(dead_letters(target))
    expected = Expected()
    with httpx.Client(timeout=30) as client:

        @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(request=requests(max_batch=target.settings.ingest.max_batch), ip=st.integers(1, 250))
        def post(request: Request, ip: int) -> None:
            headers = {"Content-Type": request.content_type, "X-Forwarded-For": f"198.51.100.{ip}"}
            response = client.post(target.url + "/api/event", content=request.body, headers=headers)
            answer = response.json() if response.headers.get("content-type") == "application/json" else {}
            expected.note(request, response.status_code, answer)

        post()
    print(f"\nhypothesis over HTTP: {expected.cases} requests, {expected.total} refusals announced")
    assert not expected.server_errors, expected.server_errors[:5]
    assert expected.total > examples // 4, "most fuzzed requests should have been refused"
    wait_for(lambda: len(dead_letters(target)) - before >= expected.total, 60, f"{expected.total} dead letters")
    letters = dead_letters(target)[before:]
    assert len(letters) == expected.total, f"{len(letters)} dead letters for {expected.total} refusals"
    kinds = Counter(letter.kind for letter in letters)
    missing_kinds = {k: n for k, n in expected.kinds.items() if kinds[k] < n}
    assert not missing_kinds, f"refusals without a dead letter of their kind: {missing_kinds}"
    payloads = Counter(_payload(letter) for letter in letters)
    missing = [forms[0][:80] for forms, n in expected.payloads.items() if sum(payloads[p] for p in forms) < n]
    assert not missing, f"refused bodies not in the dead letters: {missing[:5]}"
    text = "\n".join(letter.payload or "" for letter in letters)
    # Payloads are JSON (escaped) and a refused enriched event carries its id in lower case.
    lost_ids = sorted(i for i in expected.event_ids if not {i, json.dumps(i)[1:-1], i.lower()} & _substrings(text, i))
    assert not lost_ids, f"refused events not findable in the dead letters by id: {lost_ids[:5]}"
