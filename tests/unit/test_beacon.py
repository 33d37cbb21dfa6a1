import json
from typing import Any

import pytest

from ingest.beacon import ParsedBody, Rejection, neutralise_formula, parse_beacons

VALID: dict[str, Any] = {
    "v": 1,
    "id": "0b9f7f2e-8f2a-4c1e-9a53-6f0b3c1d2e4f",
    "k": "pageview",
    "s": "a.com",
    "u": "https://a.com/",
    "te": 1_700_000_000_000,
    "ts": 1_700_000_000_500,
}


def parse(body: object, max_batch: int = 10) -> ParsedBody | Rejection:
    return parse_beacons(json.dumps(body).encode(), max_batch=max_batch)


def test_a_valid_beacon_is_accepted() -> None:
    parsed = parse(VALID)
    assert isinstance(parsed, ParsedBody)
    assert [b.id for b in parsed.beacons] == [VALID["id"]] and not parsed.invalid


@pytest.mark.parametrize(
    "change, field",
    [
        ({"id": "not-a-uuid"}, "id (event_id)"),
        ({"te": "yesterday"}, "te (ts_event)"),
        ({"te": 1.5}, "te (ts_event)"),
        ({"k": "purchase"}, "k (type)"),
        ({"u": "x" * 2001}, "u (url)"),
        ({"r": "x" * 2001}, "r (referrer)"),
        ({"v": 2}, "v (schema version)"),
        ({"p": {f"k{i}": "v" for i in range(21)}}, "p (props)"),
        ({"p": {"k": "v" * 257}}, "p (props)"),
        ({"s": ""}, "s (site_id)"),
    ],
)
def test_an_invalid_field_is_named_in_the_error(change: dict[str, Any], field: str) -> None:
    parsed = parse(VALID | change)
    assert isinstance(parsed, ParsedBody) and not parsed.beacons
    (_, rejection), *_ = parsed.invalid
    assert rejection.status == 422
    assert any(e["field"] == field for e in rejection.errors), rejection.errors


def test_a_missing_required_field_is_named() -> None:
    body = {k: v for k, v in VALID.items() if k != "u"}
    parsed = parse(body)
    assert isinstance(parsed, ParsedBody)
    assert parsed.invalid[0][1].errors[0]["field"] == "u (url)"


@pytest.mark.parametrize(
    "raw, status, kind",
    [(b"{not json", 400, "malformed_json"), (b"\xff\xfe", 400, "malformed_json"), (b"[]", 400, "empty_batch")],
)
def test_an_undecodable_body_is_refused_whole(raw: bytes, status: int, kind: str) -> None:
    parsed = parse_beacons(raw, max_batch=10)
    assert isinstance(parsed, Rejection) and (parsed.status, parsed.kind) == (status, kind)


def test_a_batch_over_the_bound_is_refused() -> None:
    parsed = parse([VALID] * 11, max_batch=10)
    assert isinstance(parsed, Rejection) and parsed.status == 413


def test_one_bad_item_does_not_cost_the_rest_of_the_batch() -> None:
    parsed = parse([VALID, VALID | {"te": "x"}, 7])
    assert isinstance(parsed, ParsedBody) and parsed.is_batch
    assert len(parsed.beacons) == 1
    fields = [r.errors[0]["field"] for _, r in parsed.invalid]
    assert fields == ["[1].te (ts_event)", "[2]"]


@pytest.mark.parametrize("text", ["=HYPERLINK(1)", "+1", "-2", "@SUM(A1)"])
def test_spreadsheet_formulas_are_neutralised(text: str) -> None:
    assert neutralise_formula(text) == "'" + text
    parsed = parse(VALID | {"k": "event", "n": text, "p": {text: text}})
    assert isinstance(parsed, ParsedBody)
    beacon = parsed.beacons[0]
    assert beacon.n == "'" + text
    assert beacon.props_as_text() == {"'" + text: "'" + text}
