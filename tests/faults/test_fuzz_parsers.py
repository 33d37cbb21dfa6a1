"""Property-based fuzzing of ingest's parsers and validators, and of what the archiver decodes.

No services: these call the pure functions directly, so they run many cases fast. CI runs a few
hundred per property; ``make test-long`` runs thousands (the ``long`` ids).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Message
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from archiver.columnar import decode_batch
from archiver.consumer import Archiver, event_row
from archiver.dedup import SeenIds
from ingest.beacon import Rejection, parse_beacons
from ingest.enrich import EnrichError, RequestFacts, enrich
from tally.deadletter import FAILURE_KINDS, MAX_PAYLOAD_BYTES, DeadLetter, dead_letter
from tally.schema import decode_event
from tests.faults.payloads import Request, requests, valid_beacons
from tests.faults.stack import settings_from

RECEIVED = 1_795_000_000_000
SIZES = [pytest.param(400, id="short"), pytest.param(3000, id="long", marks=pytest.mark.long)]


def fuzz(examples: int) -> settings:
    """Hypothesis settings for one property: ``examples`` cases, no deadline (the machine is shared)."""
    return settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))


@pytest.fixture
def cases(request: pytest.FixtureRequest) -> Iterator[list[int]]:
    """A counter the property bumps once per generated case; the count is printed (run with -s)."""
    count = [0]
    yield count
    print(f"\n{request.node.name}: {count[0]} cases")


def assert_refusal(rejection: Rejection) -> None:
    assert rejection.kind in FAILURE_KINDS, rejection
    assert 400 <= rejection.status < 500, rejection


@pytest.mark.parametrize("examples", SIZES)
def test_any_body_parses_to_beacons_or_a_refusal_of_a_known_kind_and_never_raises(
    examples: int, cases: list[int]
) -> None:
    @fuzz(examples)
    @given(request=requests(), raw=st.binary(max_size=200))
    def parse_any(request: Request, raw: bytes) -> None:
        cases[0] += 1
        for one in (request, Request(raw, "text/plain")):
            parsed = parse_beacons(one.body, max_batch=50)
            if isinstance(parsed, Rejection):
                assert_refusal(parsed)
                continue
            assert len(parsed.beacons) + len(parsed.invalid) == len(one.items), "every item is kept or refused"
            for _item, rejection in parsed.invalid:
                assert_refusal(rejection)
                assert rejection.errors, "a refused item names the field at fault"

    parse_any()


@pytest.mark.parametrize("examples", SIZES)
def test_deeply_nested_json_is_refused_as_malformed_not_a_crash(examples: int, cases: list[int]) -> None:
    @fuzz(examples)
    @given(depth=st.integers(900, 40_000), opener=st.sampled_from([b"[", b'{"a":']))
    def nested(depth: int, opener: bytes) -> None:
        cases[0] += 1
        parsed = parse_beacons(opener * depth, max_batch=50)
        assert isinstance(parsed, Rejection) and parsed.kind == "malformed_json", parsed

    nested()


def wild_times() -> st.SearchStrategy[dict[str, Any]]:
    """Valid beacons whose device clock fields take any value the wire format allows."""
    bound = st.integers(0, 10**14) | st.sampled_from([0, 10**14])
    return st.builds(lambda b, te, ts: b | {"te": te, "ts": ts}, valid_beacons(), bound, bound) | valid_beacons()


@pytest.mark.parametrize(
    ("sent_after_event_ms", "accepted"),
    [(0, True), (3 * 3_600_000, True), (-30_000, True), (8 * 86_400_000, False), (-86_400_000, False)],
)
def test_an_event_sent_more_than_a_week_after_it_happened_or_before_it_is_refused(
    sent_after_event_ms: int, accepted: bool
) -> None:
    beacon = {"id": "0b9f7f2e-8f2a-4c1e-9a53-6f0b3c1d2e4f", "s": "a.com", "u": "https://a.com/", "te": 10**13}
    parsed = parse_beacons(json.dumps(beacon | {"ts": 10**13 + sent_after_event_ms}).encode(), max_batch=1)
    assert not isinstance(parsed, Rejection)
    assert bool(parsed.beacons) == accepted
    if not accepted:
        assert [e["field"] for e in parsed.invalid[0][1].errors] == ["ts (ts_sent)"]


@pytest.mark.parametrize("examples", SIZES)
def test_every_event_ingest_accepts_is_one_the_archiver_stores_in_raw(examples: int, cases: list[int]) -> None:
    """Accepted means archivable: the archiver's row builder and its batch decoder both take the
    event and agree on its date; otherwise an accepted event would end up in raw.rejected."""

    @fuzz(examples)
    @given(beacon=wild_times(), agent=st.text(max_size=80), ip=st.ip_addresses(v=4).map(str))
    def accepted_is_archivable(beacon: dict[str, Any], agent: str, ip: str) -> None:
        cases[0] += 1
        parsed = parse_beacons(json.dumps(beacon).encode(), max_batch=50)
        if isinstance(parsed, Rejection) or not parsed.beacons:
            return
        try:
            event = enrich(parsed.beacons[0], RequestFacts(ip, agent, RECEIVED), salt=b"s" * 32)
        except EnrichError:
            return
        value = event.to_json()
        row = event_row(decode_event(value), 0, 7)
        batch = decode_batch([value], [0], [7])
        assert batch is not None, "the batch decoder refused an accepted event"
        assert batch.column("event_date").to_pylist() == [row["event_date"]]
        assert ip not in value.decode() or ip in json.dumps(beacon), "the client IP must never leave ingest"

    accepted_is_archivable()


@pytest.mark.parametrize("examples", SIZES)
def test_a_dead_letter_round_trips_with_its_payload_kept_or_truncated_and_marked(
    examples: int, cases: list[int]
) -> None:
    @fuzz(examples)
    @given(
        kind=st.sampled_from(sorted(FAILURE_KINDS)),
        payload=st.binary(max_size=MAX_PAYLOAD_BYTES + 64)
        | st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")),
        message=st.text(max_size=100),
    )
    def round_trip(kind: str, payload: bytes, message: str) -> None:
        cases[0] += 1
        letter = dead_letter(
            component="tally-ingest", kind=kind, message=message, status=400, received_at=RECEIVED, payload=payload
        )
        again = DeadLetter.from_json(letter.to_json())
        assert again == letter
        kept = again.payload.encode() if again.payload is not None else base64.b64decode(again.payload_b64 or "")
        assert kept == payload[:MAX_PAYLOAD_BYTES]
        assert again.truncated == (len(payload) > MAX_PAYLOAD_BYTES) and again.payload_size == len(payload)

    round_trip()


@pytest.fixture(scope="module")
def archiver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Archiver]:
    """An archiver over an empty warehouse; its consumer is never polled (no broker needed)."""
    env = {"TALLY_HOME": str(tmp_path_factory.mktemp("archiver")), "TALLY_KAFKA__BOOTSTRAP_SERVERS": "127.0.0.1:9"}
    with settings_from(env) as settings:
        archiver = Archiver(settings)
    archiver.consumer.close()  # routing needs no broker
    yield archiver


@pytest.mark.parametrize("examples", SIZES)
def test_the_archiver_routes_any_message_to_raw_or_rejected_and_never_crashes(
    archiver: Archiver, examples: int, cases: list[int]
) -> None:
    """A poison message on ``pageviews`` must become a raw.rejected row: an exception would stop
    the archiver on it after every restart, and block its partition."""

    @fuzz(examples)
    @given(values=st.lists(st.binary(max_size=300) | requests().map(lambda r: r.body), min_size=1, max_size=4))
    def route_any(values: list[bytes]) -> None:
        cases[0] += 1
        archiver.seen = SeenIds(2)  # each example on its own: no id counts as seen before
        topic = archiver.events_topic
        messages = [Message(topic=topic, partition=0, offset=i, value=v) for i, v in enumerate(values)]
        raw, rejected = archiver.route(messages)
        assert raw.count + rejected.count + archiver.duplicates == len(values)

    route_any()
