"""Decode a whole batch of Kafka messages into Arrow columns at once (pyarrow's C++ JSON reader).

The fast path of the archiver. It is as strict as :func:`tally.schema.decode_event`: the
reader infers each column's type from the batch (cheaper for it than converting to a given
schema), and any column whose type is not exactly its schema type (a string where a number
belongs, a float, a boolean for an int, an int beyond 32 bits for an INT, a string the reader
took for a timestamp, a NaN for a DOUBLE) makes the batch fall back; a DOUBLE written as a whole
number is read as decode_event reads it. Whenever anything in the batch is off (a
poison message, a missing required field, a stray newline) it returns None and the archiver
decodes that batch message by message instead, which routes the bad ones to raw.rejected.
Both paths produce the same rows.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from tally.schema import FIELDS, required_fields, schema_defaults
from tally.table_schemas import raw_pageviews_schema

_RAW = raw_pageviews_schema()
_EVENT_FIELDS = [_RAW.field(name) for name in FIELDS]
# One thread: the archiver is CPU-bound on a small machine, and the reader's threads cost more
# CPU per event than they save in wall-clock time there.
_READ = pajson.ReadOptions(use_threads=False)
_INDEX = {f.name: i for i, f in enumerate(_EVENT_FIELDS)}
_PROPS_KEY = b'"props"'
_NO_PROPS = b'"props":{}'  # how Tally's own producers write an empty map (compact JSON)


def _without_props(value: bytes) -> bool:
    """True when a message certainly has no properties: every ``"props"`` in it is ``"props":{}``.

    A real props key is one of the occurrences, so it is then empty too; any other text (a key
    that is not top-level, a title quoting it) only makes the message go through json.loads.
    """
    return value.count(_PROPS_KEY) == value.count(_NO_PROPS)


def _props(values: list[bytes], inferred: pa.DataType | None) -> pa.Array:
    """The props map column, given the type the JSON reader inferred for props (None: no
    message has the key). Only messages that may carry properties are parsed again."""
    if inferred is None or pa.types.is_null(inferred) or (pa.types.is_struct(inferred) and not inferred.num_fields):
        # The usual batch: every props is absent, null or {} (a key anywhere would be a field).
        empty = pa.array(np.zeros(len(values) + 1, dtype=np.int32))
        return pa.MapArray.from_arrays(empty, pa.array([], pa.string()), pa.array([], pa.string()))
    if not pa.types.is_struct(inferred):
        raise TypeError(f"props must be a JSON object, found {inferred}")
    counts: list[int] = []
    keys: list[str] = []
    items: list[str] = []
    for value in values:
        if _without_props(value):
            counts.append(0)
            continue
        props = json.loads(value).get("props") or {}
        if not all(type(k) is str and type(v) is str for k, v in props.items()):
            raise TypeError("props must map strings to strings")
        keys.extend(props.keys())
        items.extend(props.values())
        counts.append(len(props))
    offsets = pa.array(np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int32))
    return pa.MapArray.from_arrays(offsets, pa.array(keys, pa.string()), pa.array(items, pa.string()))


def _one_object_per_line(values: list[bytes], joined: bytes) -> bool:
    """Whether each value is one line of the newline-joined batch, from ``{`` to ``}``.

    Then every value holds at least one JSON value of its own (a value cannot continue into
    the next one, which starts with ``{``), so the reader's row count equals the number of
    values exactly when each holds one object, and row i is message i.
    """
    if joined.count(b"\n") != len(values) - 1:
        return False
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    if not lengths.all():
        return False
    ends = np.cumsum(lengths + 1) - 1  # where each value's separator (or the end) is
    data = np.frombuffer(joined, dtype=np.uint8)
    return bool((data[ends - lengths] == ord("{")).all() and (data[ends - 1] == ord("}")).all())


def _column(table: pa.Table, field: pa.Field) -> pa.ChunkedArray | pa.Array:
    """One event column in its schema type, from the type the reader inferred for it."""
    if field.name not in table.column_names:  # no message of the batch has the field
        return pa.nulls(table.num_rows, field.type)
    column = table.column(field.name)
    if pa.types.is_null(column.type):  # every message has it null
        return pa.nulls(table.num_rows, field.type)
    if column.type != field.type:
        if column.type != pa.int64() or field.type not in (pa.int32(), pa.float64()):
            raise TypeError(f"field {field.name!r}: expected {field.type}, read {column.type}")
        # Safe casts: an INT beyond 32 bits raises, so does a DOUBLE written as a whole number past 2**53.
        column = pc.cast(column, field.type)
    if pa.types.is_floating(field.type) and pc.any(pc.invert(pc.is_finite(column))).as_py():
        # The reader takes NaN for a number; decode_event refuses it, so the batch falls back.
        raise ValueError(f"field {field.name!r}: NaN or infinity")
    return column


def decode_batch(values: list[bytes], partitions: list[int], offsets: list[int]) -> pa.Table | None:
    """raw.pageviews rows for these message values, or None to take the message-by-message path."""
    if not values:
        return None
    joined = b"\n".join(values)
    if not _one_object_per_line(values, joined):
        return None
    try:
        # Fields outside the schema (props, fields of newer schema versions) are inferred too;
        # the type inferred for props says whether any message of the batch has a property.
        table = pajson.read_json(pa.BufferReader(joined), read_options=_READ)
        if table.num_rows != len(values):
            return None
        inferred = table.schema.field("props").type if "props" in table.column_names else None
        columns = [_props(values, inferred) if f.name == "props" else _column(table, f) for f in _EVENT_FIELDS]
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError, TypeError, AttributeError, KeyError):
        return None
    for name in required_fields():
        if columns[_INDEX[name]].null_count:
            return None
    for name, default in schema_defaults().items():
        i = _INDEX[name]
        columns[i] = pc.fill_null(columns[i], pa.scalar(default, type=_EVENT_FIELDS[i].type))
    event_time = pc.cast(columns[_INDEX["event_time"]], pa.timestamp("ms", tz="UTC"))
    columns.append(pc.cast(event_time, pa.date32()))
    columns.append(pa.array(partitions, type=pa.int32()))
    columns.append(pa.array(offsets, type=pa.int64()))
    return pa.Table.from_arrays(columns, schema=_RAW)
