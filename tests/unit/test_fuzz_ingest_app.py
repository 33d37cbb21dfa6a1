"""Fuzzing ``POST /api/event`` in-process with Tally's body and with Plausible's: never a 5xx, and
every record stored (accepted events and dead letters) one that Kafka, the archiver and Delta take.

The app is ingest's own, on an in-memory store (tests/support/ingest.py), with conf/test.yaml's
sites and limits, so that every refusal is a dead letter of its own. Bodies come from
tests/faults/payloads.py: text over the whole of Unicode (lone surrogates sent as ``\\ud800``
escapes, NUL, bidi controls, line separators, non-characters) in keys and values, numbers of
5,000 digits and ``1e400``, nesting 50-2,000 deep, and every body shape ingest reads.
CI runs a few hundred bodies a test; ``make test-long`` 10,000.
"""

from __future__ import annotations

import pytest
from hypothesis import given

from archiver.columnar import decode_batch
from tally.deadletter import DeadLetter
from tally.schema import decode_event
from tally.settings import Settings
from tests.faults.payloads import Request, plausible_requests, requests
from tests.support.fuzzing import SIZES, Findings, fuzz, stored_text_faults
from tests.support.ingest import IngestApp


@pytest.fixture
def ingest(settings: Settings) -> IngestApp:
    return IngestApp(settings)


def record_faults(topic: str, value: bytes, ingest: IngestApp) -> list[str]:
    """Why one stored record would not reach raw.pageviews or raw.rejected as it is."""
    faults = stored_text_faults(value)
    if faults:
        return faults
    try:
        if topic == ingest.settings.kafka.pageviews_topic:
            decode_event(value)
            if decode_batch([value], [0], [0]) is None:
                return [f"the archiver's batch decoder refused an accepted event: {value[:120]!r}"]
        else:
            DeadLetter.from_json(value)
    except (TypeError, ValueError) as e:
        return [f"{topic} record not readable ({e}): {value[:120]!r}"]
    return []


def post(ingest: IngestApp, request: Request, findings: Findings) -> None:
    """Send one body; note its status and anything wrong with its answer or what it stored."""
    before = len(ingest.store.records)
    status, answer = ingest.post(request.body, request.content_type)
    stored = ingest.store.records[before:]
    faults = [fault for topic, _, value in stored for fault in record_faults(topic, value, ingest)]
    events = sum(topic == ingest.settings.kafka.pageviews_topic for topic, _, _ in stored)
    if status == 202 and answer.get("accepted") != events:
        faults.append(f"answered {answer} but stored {events} events")
    if 400 <= status < 500 and events == len(stored):
        faults.append(f"refused ({status} {answer.get('error')}) without a dead letter")
    findings.note(request, status, answer, faults)


def assert_every_path_was_reached(findings: Findings) -> None:
    print(f"\n{findings.summary()}")
    assert findings.statuses[202] and any(400 <= s < 500 for s in findings.statuses), findings.summary()
    findings.assert_no_faults()


@pytest.mark.parametrize("examples", SIZES)
def test_no_tally_body_gets_a_server_error_and_everything_stored_can_be_archived(
    ingest: IngestApp, examples: int
) -> None:
    findings = Findings()

    @fuzz(examples)
    @given(request=requests(max_batch=ingest.settings.ingest.max_batch))
    def send(request: Request) -> None:
        post(ingest, request, findings)

    send()
    assert_every_path_was_reached(findings)


@pytest.mark.parametrize("examples", SIZES)
def test_no_plausible_body_gets_a_server_error_and_everything_stored_can_be_archived(
    ingest: IngestApp, examples: int
) -> None:
    findings = Findings()

    @fuzz(examples)
    @given(request=plausible_requests())
    def send(request: Request) -> None:
        post(ingest, request, findings)

    send()
    assert_every_path_was_reached(findings)
