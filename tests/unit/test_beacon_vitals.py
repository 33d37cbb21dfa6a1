"""Core Web Vitals and scroll depth on the wire (ingest/PAYLOAD.md): what the beacon accepts, what it
refuses and says so, and that an accepted vitals beacon reaches the Kafka message unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.beacon import (
    SCROLL_DEPTH_TYPES,
    VITAL_KEYS,
    WIRE_NAMES,
    Beacon,
    ParsedBody,
    parse_beacons,
    parse_item_by_item,
    parse_valid_body,
)
from ingest.enrich import Client, RequestFacts, enrich, event_record
from ingest.event_record import encode_record
from tally.schema import EVENT_TYPES, decode_event
from tally.vitals import SCROLL_DEPTH_COLUMN, SCROLL_DEPTH_KEY, SCROLL_DEPTH_MAX, VITALS, VITALS_TYPE
from tests.faults.payloads import json_values
from tests.unit.test_ingest_plausible_events import SITE, Ingest

FUZZ = settings(max_examples=300, deadline=None, database=None, suppress_health_check=list(HealthCheck))
CHROME = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36"
NOW = 1_795_000_000_000
BASE: dict[str, Any] = {"id": "0b9f7f2e-8f2a-4c1e-9a53-6f0b3c1d2e4f", "s": SITE, "u": f"https://{SITE}/", "te": NOW}
BASE["ts"] = NOW
VITALS_BEACON = BASE | {"k": VITALS_TYPE}
MEASURE_KEYS = (*VITAL_KEYS, SCROLL_DEPTH_KEY)


def parse(body: dict[str, Any]) -> ParsedBody:
    parsed = parse_beacons(json.dumps(body).encode(), max_batch=10)
    assert isinstance(parsed, ParsedBody)
    return parsed


def test_every_vital_of_the_kernel_table_is_a_beacon_key_named_after_its_column() -> None:
    assert tuple(v.name for v in VITALS) == VITAL_KEYS
    assert {key: WIRE_NAMES[key] for key in MEASURE_KEYS} == {v.name: v.column for v in VITALS} | {
        SCROLL_DEPTH_KEY: SCROLL_DEPTH_COLUMN
    }


@pytest.mark.parametrize(
    "keys, kept",
    [
        ({"lcp": 2400, "inp": 180, "cls": 0.12, "fcp": 900, "ttfb": 300, "sd": 75},
         {"lcp": 2400, "inp": 180, "cls": 0.12, "fcp": 900, "ttfb": 300, "sd": 75}),
        ({"lcp": 0}, {"lcp": 0}),
        ({"lcp": 3_600_000, "inp": 3_600_000, "fcp": 3_600_000, "ttfb": 3_600_000},
         {"lcp": 3_600_000, "inp": 3_600_000, "fcp": 3_600_000, "ttfb": 3_600_000}),
        ({"cls": 1}, {"cls": 1.0}),
        ({"cls": 1000}, {"cls": 1000.0}),
        ({"cls": -0.0}, {"cls": 0.0}),
        ({"cls": 5e-324}, {"cls": 5e-324}),
        ({"sd": 0}, {"sd": 0}),
        ({"sd": SCROLL_DEPTH_MAX}, {"sd": SCROLL_DEPTH_MAX}),
        ({"lcp": None, "ttfb": 12}, {"ttfb": 12}),
        ({"lcp": -0}, {"lcp": 0}),
    ],
    ids=["every-measure", "zero", "upper-bounds", "cls-int", "cls-upper", "cls-minus-zero", "cls-subnormal",
         "sd-zero", "sd-full", "null-is-absent", "int-minus-zero"],
)  # fmt: skip
def test_a_vitals_beacon_keeps_its_measures(keys: dict[str, Any], kept: dict[str, Any]) -> None:
    parsed = parse(VITALS_BEACON | keys)
    (beacon,) = parsed.beacons
    assert {key: getattr(beacon, key) for key in MEASURE_KEYS} == {key: kept.get(key) for key in MEASURE_KEYS}
    assert beacon.cls is None or (type(beacon.cls) is float and str(beacon.cls)[0] != "-")


def test_an_engagement_beacon_keeps_its_scroll_depth() -> None:
    (beacon,) = parse(BASE | {"k": "engagement", "e": 5000, "sd": 40}).beacons
    assert (beacon.e, beacon.sd) == (5000, 40)


@pytest.mark.parametrize(
    "body, field, says",
    [
        (VITALS_BEACON | {"lcp": -1}, "lcp (lcp_ms)", "greater than or equal to 0"),
        (VITALS_BEACON | {"inp": 3_600_001}, "inp (inp_ms)", "less than or equal to 3600000"),
        (VITALS_BEACON | {"fcp": 1.5}, "fcp (fcp_ms)", "valid integer"),
        (VITALS_BEACON | {"ttfb": 300.0}, "ttfb (ttfb_ms)", "valid integer"),
        (VITALS_BEACON | {"lcp": "1200"}, "lcp (lcp_ms)", "valid integer"),
        (VITALS_BEACON | {"lcp": True}, "lcp (lcp_ms)", "valid integer"),
        (VITALS_BEACON | {"lcp": 10**30}, "lcp (lcp_ms)", "less than or equal to 3600000"),
        (VITALS_BEACON | {"lcp": {"value": 1200}}, "lcp (lcp_ms)", "valid integer"),
        (VITALS_BEACON | {"lcp": [1200]}, "lcp (lcp_ms)", "valid integer"),
        (VITALS_BEACON | {"cls": -0.01}, "cls (cls)", "greater than or equal to 0"),
        (VITALS_BEACON | {"cls": 1000.5}, "cls (cls)", "less than or equal to 1000"),
        (VITALS_BEACON | {"cls": 1e308}, "cls (cls)", "less than or equal to 1000"),
        (VITALS_BEACON | {"cls": 10**400}, "cls (cls)", "valid number"),
        (VITALS_BEACON | {"cls": "0.1"}, "cls (cls)", "valid number"),
        (VITALS_BEACON | {"cls": False}, "cls (cls)", "valid number"),
        (VITALS_BEACON | {"cls": {"value": 0.1}}, "cls (cls)", "valid number"),
        (VITALS_BEACON | {"sd": 101}, "sd (scroll_depth)", "less than or equal to 100"),
        (VITALS_BEACON | {"sd": -1}, "sd (scroll_depth)", "greater than or equal to 0"),
        (VITALS_BEACON | {"sd": 50.5}, "sd (scroll_depth)", "valid integer"),
        (VITALS_BEACON | {"sd": "50"}, "sd (scroll_depth)", "valid integer"),
        (VITALS_BEACON, "k (type)", "a vitals event carries at least one of lcp, inp, cls, fcp, ttfb, sd"),
        (VITALS_BEACON | dict.fromkeys(MEASURE_KEYS), "k (type)", "at least one of"),
        (BASE | {"lcp": 1200}, "lcp (lcp_ms)", "only vitals events carry Core Web Vitals; send lcp with k: vitals"),
        (BASE | {"k": "engagement", "cls": 0.1}, "cls (cls)", "send cls with k: vitals"),
        (BASE | {"k": "event", "n": "x", "ttfb": 1}, "ttfb (ttfb_ms)", "only vitals events"),
        (BASE | {"sd": 40}, "sd (scroll_depth)", "events carry a scroll depth; not pageview"),
        (BASE | {"k": "event", "n": "x", "sd": 40}, "sd (scroll_depth)", "not event"),
    ],
    ids=["lcp-negative", "inp-over", "fcp-float", "ttfb-whole-float", "lcp-string", "lcp-bool", "lcp-huge",
         "lcp-object", "lcp-list", "cls-negative", "cls-over", "cls-1e308", "cls-huge-int", "cls-string",
         "cls-bool", "cls-object", "sd-over", "sd-negative", "sd-float", "sd-string", "vitals-without-measure",
         "vitals-all-null", "lcp-on-pageview", "cls-on-engagement", "ttfb-on-event", "sd-on-pageview",
         "sd-on-event"],
)  # fmt: skip
def test_a_refused_vitals_key_is_named_with_what_to_fix(body: dict[str, Any], field: str, says: str) -> None:
    raw = json.dumps(body).encode()
    assert parse_valid_body(raw, max_batch=10) is None  # the fast path never accepts it
    parsed = parse(body)
    assert not parsed.beacons
    ((_, rejection),) = parsed.invalid
    assert (rejection.status, rejection.kind) == (422, "invalid_event")
    assert any(e["field"] == field and says in e["error"] for e in rejection.errors), rejection.errors


def test_misplaced_vitals_keys_are_each_named() -> None:
    (_, rejection), *_ = parse(BASE | {"lcp": 1, "inp": 2, "sd": 3}).invalid
    assert [e["field"] for e in rejection.errors] == ["lcp (lcp_ms)", "inp (inp_ms)", "sd (scroll_depth)"]


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400"])
def test_a_cls_that_is_no_finite_number_is_refused_as_such(literal: bytes) -> None:
    raw = json.dumps(VITALS_BEACON).encode()[:-1] + b', "cls": ' + literal + b"}"
    parsed = parse_beacons(raw, max_batch=10)
    assert isinstance(parsed, ParsedBody) and not parsed.beacons
    ((_, rejection),) = parsed.invalid
    assert rejection.errors == ({"field": "cls (cls)", "error": "Input should be a finite number"},)


@pytest.fixture
def ingest(tmp_path: Path) -> Ingest:
    return Ingest(tmp_path)


@pytest.mark.parametrize(
    "raw",
    [
        b', "cls": NaN}',
        b', "lcp": 1e308}',
        b', "cls": 1e308}',
        b', "cls": -0}',
        b', "lcp": ' + b"9" * 4400 + b"}",
        b', "cls": 0.' + b"1" * 5000 + b"}",
        b', "lcp": {"a": {"b": {"c": [1, 2, {"d": null}]}}}}',
        b', "sd": ' + b"[" * 20_000 + b"]" * 20_000 + b"}",
    ],
    ids=["nan", "lcp-1e308", "cls-1e308", "minus-zero", "lcp-4400-digits", "cls-5000-digits", "nested", "deep"],
)
def test_hostile_vitals_values_are_answered_without_a_server_error_and_every_refusal_is_a_dead_letter(
    ingest: Ingest, raw: bytes
) -> None:
    status, answer = ingest.post(json.dumps(VITALS_BEACON | {"ttfb": 5}).encode()[:-1] + raw)
    assert status in (202, 400, 422), answer
    if status == 202:
        assert len(ingest.events()) == answer["accepted"] == 1
    else:
        assert ingest.events() == [] and len(ingest.dead_letters()) == 1


vitals_keys = st.fixed_dictionaries(
    {},
    optional={
        **{key: st.integers(0, int(v.upper)) for key, v in zip(VITAL_KEYS, VITALS, strict=True) if v.unit == "ms"},
        "cls": st.floats(0, 1000) | st.integers(0, 1000),
        SCROLL_DEPTH_KEY: st.integers(0, SCROLL_DEPTH_MAX),
    },
).filter(bool)


@FUZZ
@given(keys=vitals_keys, ts_received=st.integers(NOW - 60_000, NOW + 3_600_000))
def test_a_vitals_beacon_reaches_the_kafka_message_unchanged(keys: dict[str, Any], ts_received: int) -> None:
    (beacon,) = parse(VITALS_BEACON | keys).beacons
    event = enrich(beacon, RequestFacts("203.0.113.9", CHROME, ts_received), salt=b"s" * 32)
    decoded = decode_event(event.to_json())
    expected = {v.column: keys.get(v.name) for v in VITALS} | {SCROLL_DEPTH_COLUMN: keys.get(SCROLL_DEPTH_KEY)}
    if expected["cls"] is not None:
        expected["cls"] = float(expected["cls"]) + 0.0
    assert {column: decoded[column] for column in expected} == expected
    assert decoded["type"] == VITALS_TYPE and type(decoded["cls"]) in (float, type(None))
    # Ingest encodes its own struct, not the dataclass: the same message.
    record = event_record(beacon, Client("203.0.113.9", CHROME, b"s" * 32), ts_received)
    assert decode_event(encode_record(record)) == decoded


@FUZZ
@given(
    kind=st.sampled_from(EVENT_TYPES) | json_values,
    keys=st.dictionaries(st.sampled_from(MEASURE_KEYS), json_values | st.floats() | st.integers(), max_size=4),
)
def test_any_vitals_keys_are_judged_alike_by_both_decoders_and_never_crash(kind: Any, keys: dict[str, Any]) -> None:
    body = json.dumps(BASE | {"k": kind} | keys).encode()
    fast = parse_valid_body(body, max_batch=10)
    slow = parse_item_by_item(body, max_batch=10)
    assert isinstance(slow, ParsedBody)
    if fast is not None:
        assert not slow.invalid, f"fast path accepted what pydantic refuses: {body!r}"
        assert [msgspec.structs.asdict(b) for b in fast.beacons] == [msgspec.structs.asdict(b) for b in slow.beacons]
    for beacon in slow.beacons:  # what is accepted keeps the rules
        assert isinstance(beacon, Beacon)
        assert beacon.k == VITALS_TYPE or all(getattr(beacon, key) is None for key in VITAL_KEYS)
        assert beacon.sd is None or beacon.k in SCROLL_DEPTH_TYPES
