"""Decode a whole batch of Kafka messages into Arrow columns at once (pyarrow's C++ JSON reader).

The fast path of the archiver. It is as strict as :func:`tally.schema.decode_event`
(explicit types; a string where a number belongs fails), and whenever anything in the batch
is off (a poison message, a missing required field, a stray newline) it returns None and the
archiver decodes that batch message by message instead, which routes the bad ones to
raw.rejected. Both paths produce the same rows.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from archiver.tables import raw_pageviews_schema
from tally.schema import FIELDS, required_fields, schema_defaults

_RAW = raw_pageviews_schema()
_EVENT_FIELDS = [_RAW.field(name) for name in FIELDS]
_PARSE = pajson.ParseOptions(
    explicit_schema=pa.schema([f for f in _EVENT_FIELDS if f.name != "props"]),  # the reader has no map type
    unexpected_field_behavior="ignore",
)
_NO_PROPS = b'"props":{}'  # how Tally's own producers write an empty map (compact JSON)


def _props(values: list[bytes]) -> pa.Array:
    """The props map column; only messages that carry properties are parsed again."""
    counts: list[int] = []
    keys: list[str] = []
    items: list[str] = []
    for value in values:
        if _NO_PROPS in value or b'"props"' not in value:
            counts.append(0)
            continue
        props = json.loads(value)["props"] or {}
        if not all(type(k) is str and type(v) is str for k, v in props.items()):
            raise TypeError("props must map strings to strings")
        keys.extend(props.keys())
        items.extend(props.values())
        counts.append(len(props))
    offsets = pa.array(np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int32))
    return pa.MapArray.from_arrays(offsets, pa.array(keys, pa.string()), pa.array(items, pa.string()))


def decode_batch(values: list[bytes], partitions: list[int], offsets: list[int]) -> pa.Table | None:
    """raw.pageviews rows for these message values, or None to take the message-by-message path."""
    if not values or any(b"\n" in v or not v.startswith(b"{") for v in values):
        return None
    try:
        table = pajson.read_json(io.BytesIO(b"\n".join(values)), parse_options=_PARSE)
        props = _props(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError, TypeError, AttributeError, KeyError):
        return None
    if table.num_rows != len(values):
        return None
    for name in required_fields():
        if table.column(name).null_count:
            return None
    columns = []
    for field in _EVENT_FIELDS:
        column = props if field.name == "props" else table.column(field.name)
        default = schema_defaults().get(field.name)
        if default is not None:
            column = pc.fill_null(column, pa.scalar(default, type=field.type))
        columns.append(column)
    event_time = pc.cast(table.column("event_time"), pa.timestamp("ms", tz="UTC"))
    columns.append(pc.cast(event_time, pa.date32()))
    columns.append(pa.array(partitions, type=pa.int32()))
    columns.append(pa.array(offsets, type=pa.int64()))
    return pa.Table.from_arrays(columns, schema=_RAW)
