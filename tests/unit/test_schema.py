import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tally.schema import FIELDS, PageViewEvent, spark_ddl


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
    [("event_time", "soon"), ("is_bot", 1), ("screen_w", True), ("props", ["a"]), ("site_id", 5)],
)
def test_a_wrongly_typed_field_is_refused(field: str, value: object) -> None:
    data = json.loads(make_event().to_json())
    data[field] = value
    with pytest.raises(TypeError, match=field):
        PageViewEvent.from_json(json.dumps(data))


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
