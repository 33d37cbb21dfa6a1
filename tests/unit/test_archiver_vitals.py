"""raw.pageviews keeps Core Web Vitals and scroll depth: decoded alike by both paths, and added to
a table an older Tally wrote (real delta-rs tables in a temporary folder, no services)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from archiver.columnar import decode_batch
from archiver.decode import NOT_AN_EVENT, decode_events, event_row
from archiver.tables import ArchiveTable, TableBatch
from tally.schema import PageViewEvent, decode_event
from tally.table_schemas import RAW_PAGEVIEWS_SCHEMA
from tally.vitals import SCROLL_DEPTH_COLUMN, VITALS, VITALS_TYPE
from tests.events import page_view

NEW_COLUMNS = (*(v.column for v in VITALS), SCROLL_DEPTH_COLUMN)
MEASURES = {"lcp_ms": 2400, "inp_ms": 180, "cls": 0.12, "fcp_ms": 900, "ttfb_ms": 300, SCROLL_DEPTH_COLUMN: 75}


def vitals_event(**measures: object) -> PageViewEvent:
    """A vitals event happening now, as ingest would have produced it."""
    return dataclasses.replace(page_view("a.com"), type=VITALS_TYPE, **measures)  # type: ignore[arg-type]


def one_by_one(values: list[bytes]) -> pa.Table:
    rows = [event_row(decode_event(v), 0, i) for i, v in enumerate(values)]
    return pa.Table.from_pylist(rows, schema=RAW_PAGEVIEWS_SCHEMA)


def with_field(event: PageViewEvent, name: str, raw_value: str) -> bytes:
    """The event's JSON with one field written by hand (``"cls":NaN``), as another producer might."""
    fields = {key: value for key, value in json.loads(event.to_json()).items() if key != name}
    return json.dumps(fields, separators=(",", ":")).encode()[:-1] + f',"{name}":{raw_value}}}'.encode()


def test_the_batch_decoder_keeps_every_vital_and_scroll_depth_as_the_one_by_one_path_does() -> None:
    values = [
        vitals_event(**MEASURES).to_json(),
        vitals_event(cls=0.0, scroll_depth=0).to_json(),
        vitals_event(cls=1000.0, lcp_ms=3_600_000).to_json(),
        vitals_event(cls=5e-324).to_json(),
        page_view("a.com").to_json(),  # no vitals: nulls
        dataclasses.replace(page_view("a.com"), type="engagement", engagement_ms=10, scroll_depth=40).to_json(),
    ]
    fast = decode_batch(values, [0] * len(values), list(range(len(values))))
    assert fast is not None
    assert fast.equals(one_by_one(values))
    assert fast.schema.field("cls").type == pa.float64() and fast.schema.field(SCROLL_DEPTH_COLUMN).type == pa.int32()
    first = fast.slice(0, 1).to_pylist()[0]
    assert {column: first[column] for column in MEASURES} == MEASURES
    assert fast.column("cls").to_pylist()[4] is None and fast.column(SCROLL_DEPTH_COLUMN).to_pylist()[5] == 40


@pytest.mark.parametrize("raw_cls", ["1", "0", "-0"])
def test_a_cls_written_as_a_whole_number_is_read_as_a_double_by_both_paths(raw_cls: str) -> None:
    # JavaScript and many other encoders write 1.0 as 1: still a DOUBLE, not a poison message.
    values = [with_field(vitals_event(), "cls", raw_cls), vitals_event(cls=0.5).to_json()]
    fast = decode_batch(values, [0, 0], [0, 1])
    assert fast is not None and fast.equals(one_by_one(values))
    assert fast.column("cls").to_pylist() == [float(raw_cls), 0.5]
    assert type(decode_event(values[0])["cls"]) is float


@pytest.mark.parametrize(
    "raw_cls",
    ["NaN", "Infinity", "-Infinity", "1" + "0" * 400, "true", '"0.1"'],
    ids=["nan", "infinity", "minus-infinity", "integer-past-a-double", "bool", "string"],
)
def test_a_cls_that_is_no_finite_number_makes_the_batch_fall_back_and_is_poison(raw_cls: str) -> None:
    bad = with_field(vitals_event(), "cls", raw_cls)
    good = vitals_event(**MEASURES).to_json()
    assert decode_batch([good, bad], [0, 0], [0, 1]) is None
    rows, poison = decode_events([good, bad], [0, 0], [0, 1])
    assert rows.num_rows == 1 and rows.column("lcp_ms").to_pylist() == [2400]
    assert [p.offset for p in poison] == [1] and poison[0].reason.startswith(f"{NOT_AN_EVENT}: field 'cls'")


def test_a_scroll_depth_beyond_32_bits_makes_the_batch_fall_back_and_is_poison() -> None:
    bad = with_field(vitals_event(), SCROLL_DEPTH_COLUMN, str(2**31))
    assert decode_batch([vitals_event(cls=0.1).to_json(), bad], [0, 0], [0, 1]) is None
    rows, poison = decode_events([bad], [0], [0])
    assert rows.num_rows == 0 and len(poison) == 1


def old_schema() -> pa.Schema:
    """raw.pageviews as Tally wrote it before Core Web Vitals."""
    return pa.schema([f for f in RAW_PAGEVIEWS_SCHEMA if f.name not in NEW_COLUMNS])


def old_rows(count: int) -> pa.Table:
    events = [json.loads(page_view("a.com", path=f"/old{i}").to_json()) for i in range(count)]
    rows = [event_row({k: v for k, v in e.items() if k not in NEW_COLUMNS}, 0, i) for i, e in enumerate(events)]
    return pa.Table.from_pylist(rows, schema=old_schema())


def test_a_raw_table_written_before_the_vitals_columns_gains_them_at_once_and_old_rows_read_null(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "raw_pageviews")
    write_deltalake(uri, old_rows(3), partition_by=["event_date"])
    assert not set(NEW_COLUMNS) & set(DeltaTable(uri).schema().to_arrow().names)

    table = ArchiveTable(uri, RAW_PAGEVIEWS_SCHEMA, "event_date")
    assert table.next_offset("pageviews", 0) is None  # opening the table adds the columns, before any append
    schema = DeltaTable(uri).schema().to_arrow()
    assert {name: schema.field(name).type for name in NEW_COLUMNS} == {
        name: RAW_PAGEVIEWS_SCHEMA.field(name).type for name in NEW_COLUMNS
    }
    old = DeltaTable(uri).to_pyarrow_table(columns=["path", *NEW_COLUMNS])
    assert old.num_rows == 3
    assert all(old.column(name).null_count == 3 for name in NEW_COLUMNS)


def test_an_evolved_raw_table_keeps_its_old_rows_and_takes_vitals_events(tmp_path: Path) -> None:
    uri = str(tmp_path / "raw_pageviews")
    write_deltalake(uri, old_rows(2), partition_by=["event_date"])
    table = ArchiveTable(uri, RAW_PAGEVIEWS_SCHEMA, "event_date")
    values = [vitals_event(**MEASURES).to_json(), vitals_event(cls=0.0).to_json()]
    rows, poison = decode_events(values, [0, 0], [10, 11])
    assert not poison
    batch = TableBatch(tables=[rows])
    batch.advance("pageviews", 0, 11)
    table.append(batch)

    stored = DeltaTable(uri).to_pyarrow_table().sort_by("kafka_offset").to_pylist()
    assert [row["kafka_offset"] for row in stored] == [0, 1, 10, 11]  # nothing lost
    assert [row["path"] for row in stored[:2]] == ["/old0", "/old1"]
    assert all(row[name] is None for row in stored[:2] for name in NEW_COLUMNS)
    assert {name: stored[2][name] for name in MEASURES} == MEASURES
    assert stored[3]["cls"] == 0.0 and not math.copysign(1, stored[3]["cls"]) < 0
    assert stored[3]["lcp_ms"] is None
    assert ArchiveTable(uri, RAW_PAGEVIEWS_SCHEMA, "event_date").next_offset("pageviews", 0) == 12
    assert stored[2]["event_date"] == dt.datetime.fromtimestamp(stored[2]["event_time"] / 1000, dt.UTC).date()
