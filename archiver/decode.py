"""From Kafka message values to raw rows: events for raw.pageviews, dead letters for raw.rejected.

Pure functions, no I/O. A batch of events is decoded at once when it can be
(:func:`archiver.columnar.decode_batch`), else message by message; a message of the events
topic that is not a v1 event comes back as :class:`Poison`, for raw.rejected.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any, NamedTuple

import pyarrow as pa

from archiver.columnar import decode_batch
from tally.deadletter import DeadLetter, dead_letter
from tally.schema import decode_event
from tally.table_schemas import RAW_PAGEVIEWS_SCHEMA

# What a message that is not a v1 event is rejected with (the reason follows).
NOT_AN_EVENT = "not a v1 PageViewEvent"


def utc_date(ms: int) -> dt.date:
    """The UTC date of a time in epoch milliseconds."""
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).date()


def event_row(event: dict[str, Any], partition: int, offset: int) -> dict[str, Any]:
    """One raw.pageviews row: a decoded event's fields plus its partition date and Kafka position."""
    row = event  # decode_event returned a fresh dict: extended in place
    row["props"] = list(event["props"].items())
    row["event_date"] = utc_date(event["event_time"])
    row["kafka_partition"] = partition
    row["kafka_offset"] = offset
    return row


def rejected_row(letter: DeadLetter, topic: str, partition: int, offset: int) -> dict[str, object]:
    """One raw.rejected row."""
    return {
        "kind": letter.kind,
        "message": letter.message,
        "status": letter.status,
        "received_at": letter.received_at,
        "errors": json.dumps(letter.errors),
        "payload": letter.payload,
        "payload_b64": letter.payload_b64,
        "payload_size": letter.payload_size,
        "truncated": letter.truncated,
        "component": f"{letter.component.get('name')}/{letter.component.get('version')}",
        "source_topic": topic,
        "rejected_date": utc_date(letter.received_at),
        "kafka_partition": partition,
        "kafka_offset": offset,
    }


def undecodable(message: str, payload: bytes) -> DeadLetter:
    """The archiver's own dead letter for a message it cannot decode (kept whole for recovery)."""
    return dead_letter(
        component="tally-archiver",
        kind="undecodable_event",
        status=0,
        message=message,
        received_at=int(time.time() * 1000),
        payload=payload,
    )


def decode_dead_letter(value: bytes) -> DeadLetter:
    """A message of the dead-letter topic; one that does not decode becomes an archiver dead letter."""
    try:
        return DeadLetter.from_json(value)
    except (ValueError, TypeError, RecursionError) as e:
        return undecodable(f"dead letter not decodable: {e}", value)


class Poison(NamedTuple):
    """A message of the events topic that is not a v1 event: why, and the message itself."""

    reason: str
    value: bytes
    partition: int
    offset: int

    def letter(self) -> DeadLetter:
        """The dead letter raw.rejected keeps for it."""
        return undecodable(self.reason, self.value)


def decode_events(values: list[bytes], partitions: list[int], offsets: list[int]) -> tuple[pa.Table, list[Poison]]:
    """raw.pageviews rows for messages of the events topic, and the messages that are not events.

    The whole batch at once when every message is a v1 event (the usual case), else message by
    message. Either way the rows keep the messages' order.
    """
    events = decode_batch(values, partitions, offsets)
    if events is not None:
        return events, []
    return decode_one_by_one(values, partitions, offsets)


def decode_one_by_one(values: list[bytes], partitions: list[int], offsets: list[int]) -> tuple[pa.Table, list[Poison]]:
    """The message-by-message path, for batches that hold a message that is not a v1 event."""
    poison: list[Poison] = []
    rows: list[tuple[dict[str, Any], bytes]] = []
    for value, partition, offset in zip(values, partitions, offsets, strict=True):
        try:
            rows.append((event_row(decode_event(value), partition, offset), value))
        except (ValueError, TypeError, RecursionError) as e:  # RecursionError: JSON nested too deeply
            poison.append(Poison(f"{NOT_AN_EVENT}: {e}", value, partition, offset))
    try:
        return pa.Table.from_pylist([row for row, _ in rows], schema=RAW_PAGEVIEWS_SCHEMA), poison
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass  # some value does not fit its column (an INT beyond 32 bits): find which, row by row
    fitting = []
    for row, value in rows:
        try:
            fitting.append(pa.Table.from_pylist([row], schema=RAW_PAGEVIEWS_SCHEMA))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as e:
            reason = f"{NOT_AN_EVENT}: a value does not fit raw.pageviews: {e}"
            poison.append(Poison(reason, value, row["kafka_partition"], row["kafka_offset"]))
    return pa.concat_tables([RAW_PAGEVIEWS_SCHEMA.empty_table(), *fitting]), poison
