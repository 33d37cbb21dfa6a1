"""The fast path (msgspec) and the slow path (json + pydantic) of the beacon parser agree.

Ingest decodes nearly every body with msgspec in one pass and falls back to pydantic, which names
every field at fault, only when that fails. The fallback must never be needed to *refuse*
something: whatever the fast path accepts, the slow path accepts too, with the same values.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.beacon import Beacon, BeaconSchema, ParsedBody, parse_item_by_item, parse_valid_body
from tests.faults.payloads import Request, beacons, json_values, requests, valid_beacons

FUZZ = settings(max_examples=400, deadline=None, database=None, suppress_health_check=list(HealthCheck))
BOUNDS = ("maxLength", "minLength", "minimum", "maximum", "maxProperties")


def same_result(body: bytes, max_batch: int = 50) -> None:
    fast = parse_valid_body(body, max_batch=max_batch)
    if fast is None:
        return
    slow = parse_item_by_item(body, max_batch=max_batch)
    assert isinstance(slow, ParsedBody) and not slow.invalid, f"fast path accepted what pydantic refuses: {body!r}"
    assert fast.is_batch == slow.is_batch
    assert [msgspec.structs.asdict(b) for b in fast.beacons] == [msgspec.structs.asdict(b) for b in slow.beacons]


@FUZZ
@given(request=requests())
def test_whatever_the_fast_path_accepts_pydantic_accepts_with_the_same_values(request: Request) -> None:
    same_result(request.body)


@FUZZ
@given(
    beacon=valid_beacons(),
    key=st.sampled_from(["n", "p", "ti", "r", "l", "z", "w", "e", "ld", "v", "lcp", "inp", "cls", "fcp", "ttfb", "sd"]),
    value=json_values,
)
def test_one_field_of_any_json_value_is_judged_alike(beacon: dict[str, Any], key: str, value: Any) -> None:
    same_result(json.dumps(beacon | {key: value}).encode())


@FUZZ
@given(items=st.lists(beacons, min_size=1, max_size=5))
def test_batches_are_judged_alike(items: list[dict[str, Any]]) -> None:
    same_result(json.dumps(items).encode(), max_batch=4)


@pytest.mark.parametrize(
    "body",
    [
        b'{"id":"0b9f7f2e-8f2a-4c1e-9a53-6f0b3c1d2e4f\\n","s":"a.com","u":"https://a.com/","te":1,"ts":1}',
        b'{"id":"0b9f7f2e-8f2a-4c1e-9a53-6f0b3c1d2e4f","s":"a.com","u":"https://a.com/","te":1,"ts":1,"p":{"\\ud800":1}}',
        b'{"id":"0b9f7f2e-8f2a-4c1e-9a53-6f0b3c1d2e4f","s":"a.com","u":"https://a.com/","te":1,"ts":1,"p":{"a":1e400}}',
        b'{"id":"0b9f7f2e-8f2a-4c1e-9a53-6f0b3c1d2e4f","s":"a.com","u":"https://a.com/","te":true,"ts":1}',
        b'{"id":"0b9f7f2e-8f2a-4c1e-9a53-6f0b3c1d2e4f","s":"a.com","u":"https://a.com/","te":1.0,"ts":1}',
        b'\xef\xbb\xbf{"id":"0b9f7f2e-8f2a-4c1e-9a53-6f0b3c1d2e4f","s":"a.com","u":"https://a.com/","te":1,"ts":1}',
        # Found by the fuzzing below: msgspec skips a field a beacon lacks, json cannot read its number.
        b'{"id":"0b9f7f2e-8f2a-4c1e-9a53-6f0b3c1d2e4f","s":"a.com","u":"https://a.com/","te":1,"ts":1,"x":1'
        + b"0" * 4300
        + b"}",
    ],
    ids=[
        "newline after the id",
        "lone surrogate key",
        "infinite prop",
        "bool time",
        "float time",
        "utf-8 bom",
        "4,301 digits in an unknown field",
    ],
)
def test_edge_cases_of_the_two_decoders_go_to_the_slow_path(body: bytes) -> None:
    assert parse_valid_body(body, max_batch=1) is None


def test_a_property_name_that_utf8_cannot_store_is_refused_not_a_crash() -> None:
    body = b'{"id":"0b9f7f2e-8f2a-4c1e-9a53-6f0b3c1d2e4f","s":"a.com","u":"https://a.com/","te":1,"ts":1,"p":{"\\ud800":1}}'
    parsed = parse_item_by_item(body, max_batch=1)
    assert isinstance(parsed, ParsedBody) and not parsed.beacons
    error = parsed.invalid[0][1].errors[0]
    assert error["field"] == "p.\\ud800" and "valid Unicode" in error["error"]  # the property, named as text


def test_both_definitions_list_the_same_fields_with_the_same_bounds() -> None:
    (_, fast_defs), *_ = msgspec.json.schema_components([Beacon])[1].items()
    slow = BeaconSchema.model_json_schema()

    def bounds(schema: dict[str, Any]) -> dict[str, Any]:
        found = {k: v for k, v in schema.items() if k in BOUNDS}
        for option in schema.get("anyOf", []):
            found |= {k: v for k, v in option.items() if k in BOUNDS}
        return found

    assert list(fast_defs["properties"]) == list(slow["properties"])
    assert set(fast_defs["required"]) == set(slow["required"])
    for name, prop in slow["properties"].items():
        assert bounds(fast_defs["properties"][name]) == bounds(prop), name
    for f in msgspec.structs.fields(Beacon):
        default = f.default_factory() if f.default_factory is not msgspec.NODEFAULT else f.default
        if default is not msgspec.NODEFAULT:
            assert BeaconSchema.model_fields[f.name].get_default(call_default_factory=True) == default, f.name


def test_the_openapi_schema_describes_the_wire_format_not_the_parser() -> None:
    schema = BeaconSchema.model_json_schema()
    assert (schema["title"], schema["description"]) == (
        "Beacon",
        "One event as the tracker sends it (schema version 1).",
    )


def test_a_number_too_long_to_read_in_an_unknown_field_is_refused_whichever_path() -> None:
    body = b'{"id":"0b9f7f2e-8f2a-4c1e-9a53-6f0b3c1d2e4f","s":"a.com","u":"https://a.com/","te":1,"ts":1,"x":1'
    body += b"0" * 4300 + b"}"
    assert parse_valid_body(body, max_batch=1) is None
    refused = parse_item_by_item(body, max_batch=1)
    assert not isinstance(refused, ParsedBody)
    assert (refused.status, refused.kind) == (400, "malformed_json") and "too long" in refused.message
    short = body.replace(b"0" * 4300, b"0" * 4299)  # 4,300 digits: read by both, the field ignored
    fast, slow = parse_valid_body(short, max_batch=1), parse_item_by_item(short, max_batch=1)
    assert fast is not None and isinstance(slow, ParsedBody) and len(fast.beacons) == len(slow.beacons) == 1
