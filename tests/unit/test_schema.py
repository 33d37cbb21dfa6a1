import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tally.schema import EVENT_TYPES, FIELDS, PageViewEvent, decode_event, spark_ddl


def make_event(**overrides: object) -> PageViewEvent:
    base: dict[str, object] = dict(
        event_id="0b9f7f2e-8f2a-4c1e-9a53-6f0b3c1d2e4f",
        type="pageview",
        site_id="a.com",
        url="https://a.com/x",
        hostname="a.com",
        path="/x",
        ts_event=1,
        ts_sent=2,
        ts_received=3,
        event_time=2,
        visitor_id="v",
    )
    base.update(overrides)
    return PageViewEvent(**base)  # type: ignore[arg-type]


def test_an_event_survives_a_json_round_trip() -> None:
    event = make_event(props={"plan": "pro"}, is_bot=True, screen_w=390)
    assert PageViewEvent.from_json(event.to_json()) == event


def test_unknown_fields_from_a_newer_schema_are_ignored() -> None:
    data = json.loads(make_event().to_json())
    data["added_in_v2"] = "x"
    assert PageViewEvent.from_json(json.dumps(data)) == make_event()


@pytest.mark.parametrize(
    "field, value",
    [("event_time", "soon"), ("is_bot", 1), ("screen_w", True), ("props", ["a"]), ("site_id", 5),
     ("cls", True), ("cls", "0.1"), ("lcp_ms", 1.5), ("scroll_depth", 40.0)],
)  # fmt: skip
def test_a_wrongly_typed_field_is_refused(field: str, value: object) -> None:
    data = json.loads(make_event().to_json())
    data[field] = value
    with pytest.raises(TypeError, match=field):
        PageViewEvent.from_json(json.dumps(data))


def test_a_vitals_event_survives_a_json_round_trip() -> None:
    event = make_event(type="vitals", lcp_ms=2400, inp_ms=180, cls=0.12, fcp_ms=900, ttfb_ms=300, scroll_depth=75)
    assert PageViewEvent.from_json(event.to_json()) == event
    assert "vitals" in EVENT_TYPES and spark_ddl().count("`cls` DOUBLE") == 1


@pytest.mark.parametrize("written, read", [("1", 1.0), ("0", 0.0), ("-0", 0.0), ("0.25", 0.25), ("1e2", 100.0)])
def test_a_double_written_as_a_whole_number_is_read_as_a_float(written: str, read: float) -> None:
    data = json.loads(make_event().to_json())
    del data["cls"]
    raw = json.dumps(data)[:-1] + f', "cls": {written}}}'
    cls = decode_event(raw)["cls"]
    assert (type(cls), cls) == (float, read)


@pytest.mark.parametrize("written", ["NaN", "Infinity", "-Infinity", "1" + "0" * 400])
def test_a_double_that_is_no_finite_number_is_refused(written: str) -> None:
    data = json.loads(make_event().to_json())
    del data["cls"]
    with pytest.raises(ValueError, match="'cls': expected a finite DOUBLE"):
        decode_event(json.dumps(data)[:-1] + f', "cls": {written}}}')


def test_a_non_object_message_is_refused() -> None:
    with pytest.raises(TypeError):
        PageViewEvent.from_json("[1, 2]")


def test_the_spark_ddl_lists_every_field_in_order() -> None:
    ddl = spark_ddl()
    positions = [ddl.index(f"`{name}`") for name in FIELDS]
    assert positions == sorted(positions)
    assert "`props` MAP<STRING,STRING>" in ddl


@given(st.dictionaries(st.text(min_size=1, max_size=10), st.text(max_size=20), max_size=5), st.text(max_size=50))
def test_any_props_and_title_round_trip(props: dict[str, str], title: str) -> None:
    event = make_event(props=props, title=title)
    assert PageViewEvent.from_json(event.to_json()) == event
