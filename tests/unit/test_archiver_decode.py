"""The archiver's two decoders agree, and the batch one steps aside for anything odd."""

import json

import pyarrow as pa
import pytest

from archiver.columnar import decode_batch
from archiver.decode import NOT_AN_EVENT, decode_events, event_row
from tally.schema import decode_event
from tally.table_schemas import raw_pageviews_schema
from tests.events import page_view


def one_by_one(values: list[bytes]) -> pa.Table:
    rows = [event_row(decode_event(v), 0, i) for i, v in enumerate(values)]
    return pa.Table.from_pylist(rows, schema=raw_pageviews_schema())


def test_the_batch_decoder_builds_the_same_rows_as_the_one_by_one_path() -> None:
    events = [page_view("a.com", path=f"/p{i}") for i in range(200)]
    values = [e.to_json() for e in events]
    values[3] = json.dumps(json.loads(values[3]) | {"props": {"plan": "pro", "'=x": "y"}, "is_bot": True}).encode()
    values[4] = json.dumps({k: v for k, v in json.loads(values[4]).items() if k not in ("is_bot", "props")}).encode()
    values[5] = json.dumps(json.loads(values[5]) | {"from_schema_v2": [1, 2]}).encode()
    fast = decode_batch(values, [0] * len(values), list(range(len(values))))
    assert fast is not None
    assert fast.equals(one_by_one(values))
    assert fast.column("props")[3].as_py() == [("plan", "pro"), ("'=x", "y")]


@pytest.mark.parametrize(
    "change",
    [
        {"event_time": "soon"},
        {"event_time": 1.5},
        {"is_bot": 1},
        {"event_id": None},
        {"props": {"k": 1}},
        {"site_id": 7},
    ],
)
def test_a_batch_with_one_bad_event_falls_back_and_the_bad_event_is_refused(change: dict[str, object]) -> None:
    good = page_view("a.com").to_json()
    bad = json.dumps(json.loads(page_view("a.com").to_json()) | change).encode()
    assert decode_batch([good, bad], [0, 0], [0, 1]) is None
    with pytest.raises((TypeError, ValueError)):
        decode_event(bad)


@pytest.mark.parametrize("value", [b"not json", b"", b"[1]", b'{"a": 1}\n{"b": 2}'])
def test_undecodable_messages_make_the_batch_fall_back(value: bytes) -> None:
    assert decode_batch([page_view("a.com").to_json(), value], [0, 0], [0, 1]) is None


def test_a_non_hex_event_id_gets_a_stable_dedup_key_instead_of_crashing_the_archiver() -> None:
    from archiver.dedup import id_key

    assert id_key("not-a-uuid") == id_key("not-a-uuid")
    assert id_key("not-a-uuid") != id_key("not-a-uuid-2")
    assert id_key("00000000-0000-0001-8000-000000000000") == 1


def test_props_are_kept_when_another_field_quotes_an_empty_props_map() -> None:
    quoting = json.dumps(json.loads(page_view("a.com").to_json()) | {"title": '"props":{}', "props": {"k": "v"}})
    values = [page_view("a.com").to_json(), quoting.encode()]
    fast = decode_batch(values, [0, 0], [0, 1])
    assert fast is not None
    assert fast.column("props").to_pylist() == [[], [("k", "v")]]
    assert fast.equals(one_by_one(values))


def test_messages_that_only_parse_when_joined_make_the_batch_fall_back() -> None:
    """Neither value is one event, but joined by newlines they read as the right number of rows."""
    a, b, c = (page_view("a.com").to_json() for _ in range(3))
    values = [a[:-1] + b',"x":', b'{"b":1}}', b + c]  # a's event swallows the 2nd value; the 3rd holds two
    assert decode_batch(values, [0, 0, 0], [0, 1, 2]) is None
    assert decode_batch([a + b" "], [0], [0]) is None  # valid, but not from { to }: the careful path decides


@pytest.mark.parametrize(
    "titles",
    [
        ["2024-01-01", "hello", None],  # a date-like string among others stays the string it was
        ["2024-01-01", "2024-01-02T10:00:00"],  # every title date-like: read as a timestamp, or refused
        ["1", "true", "null", "{}"],
    ],
)
def test_strings_that_look_like_other_types_are_kept_exactly_or_the_batch_falls_back(titles: list[str | None]) -> None:
    values = [json.dumps(json.loads(page_view("a.com").to_json()) | {"title": t}).encode() for t in titles]
    fast = decode_batch(values, [0] * len(values), list(range(len(values))))
    assert fast is None or fast.equals(one_by_one(values))
    assert fast is None or fast.column("title").to_pylist() == titles


def test_numbers_beyond_their_column_make_the_batch_fall_back() -> None:
    for change in ({"screen_w": 2**31}, {"ts_sent": 2**63}, {"screen_w": 1e3}):
        value = json.dumps(json.loads(page_view("a.com").to_json()) | change).encode()
        assert decode_batch([page_view("a.com").to_json(), value], [0, 0], [0, 1]) is None


def test_the_events_of_a_batch_with_poison_are_kept_and_the_poison_is_returned_in_order() -> None:
    good, wide = page_view("a.com"), json.dumps(json.loads(page_view("a.com").to_json()) | {"screen_w": 2**40})
    values = [good.to_json(), b"not json", wide.encode(), b"[1]"]
    events, poison = decode_events(values, [3] * len(values), [10, 11, 12, 13])
    assert events.column("event_id").to_pylist() == [good.event_id]
    # Undecodable messages first, in order; then those with a value that does not fit its column.
    assert [(p.partition, p.offset, p.value) for p in poison] == [
        (3, 11, b"not json"),
        (3, 13, b"[1]"),
        (3, 12, wide.encode()),
    ]
    assert all(p.reason.startswith(NOT_AN_EVENT) for p in poison)
    assert "does not fit" in poison[2].reason
    assert poison[0].letter().kind == "undecodable_event" and poison[0].letter().payload == "not json"


def test_a_batch_of_events_only_has_no_poison() -> None:
    values = [page_view("a.com").to_json() for _ in range(3)]
    events, poison = decode_events(values, [0, 0, 0], [0, 1, 2])
    assert events.num_rows == 3 and poison == []
