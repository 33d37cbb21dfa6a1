"""The interfaces ingest's steps are written against, named once (as Starlette's ``types.py``).

The pipeline depends on these, not on the adapters behind them, so it imports no Kafka client
and its unit tests can pass an in-memory fake.
"""

from __future__ import annotations

from typing import Protocol

from ingest.spool import Record


class RecordStore(Protocol):
    """Where the pipeline makes a request's records durable before it answers.

    The adapter is :class:`ingest.durable.DurableLog` (Kafka, else the local spool).
    """

    async def append(self, records: list[Record]) -> str:
        """Store ``(topic, key, value)`` records durably; return where: ``"kafka"`` or ``"spool"``.

        Raises :class:`ingest.spool.SpoolWriteFailed` when they could be stored nowhere (Kafka
        failing and the spool's disk full): nothing of them was kept, the request must be refused.
        """
        ...
