"""An in-memory :class:`ingest.types.RecordStore`, in place of the lifespan's durable log."""

from __future__ import annotations

import json
from typing import Any

from ingest.spool import Record
from tally.deadletter import DeadLetter

PAGEVIEWS_TOPIC, REJECTED_TOPIC = "pageviews", "pageviews.rejected"  # the settings' defaults


class MemoryStore:
    """Every append kept as one list of records (a request's events and dead letters together)."""

    def __init__(self) -> None:
        self.appends: list[list[Record]] = []

    async def append(self, records: list[Record]) -> str:
        self.appends.append(records)
        return "kafka"

    @property
    def records(self) -> list[Record]:
        """Every record appended, in order."""
        return [record for records in self.appends for record in records]

    def events(self, topic: str = PAGEVIEWS_TOPIC) -> list[dict[str, Any]]:
        """The stored events, decoded."""
        return [json.loads(value) for t, _, value in self.records if t == topic]

    def letters(self, topic: str = REJECTED_TOPIC) -> list[DeadLetter]:
        """The stored dead letters, decoded."""
        return [DeadLetter.from_json(value) for t, _, value in self.records if t == topic]
