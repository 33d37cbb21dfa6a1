"""Dead letters, shared by ingest and the archiver (after Snowplow's bad rows).

A rejected request is data, not a log line.

Each record names the component that refused it, a failure kind from a closed set, the
specifics, and the original payload (truncated past a bound, and marked so) for recovery.
"""

from __future__ import annotations

import base64
import json
from dataclasses import asdict, dataclass
from typing import Any

import tally

MAX_PAYLOAD_BYTES = 16384

# The closed, versioned set of failure kinds (version 1).
FAILURE_KINDS = frozenset(
    {
        "malformed_json",
        "empty_batch",
        "batch_too_large",
        "body_too_large",
        "unsupported_media_type",
        "invalid_event",
        "invalid_url",
        "unknown_site",
        "foreign_host",
        "rate_limited",
        "undecodable_event",  # archiver: a message on the pageviews topic that is not a v1 event
    }
)


@dataclass(frozen=True)
class DeadLetter:
    kind: str
    message: str
    status: int
    received_at: int
    errors: list[dict[str, str]]
    payload: str | None
    payload_b64: str | None
    payload_size: int
    truncated: bool
    component: dict[str, str]
    failure_schema: int = 1

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":"), ensure_ascii=False).encode()

    @classmethod
    def from_json(cls, raw: bytes | str) -> DeadLetter:
        data: dict[str, Any] = json.loads(raw)
        return cls(**data)


def dead_letter(
    *,
    component: str,
    kind: str,
    message: str,
    status: int,
    received_at: int,
    payload: bytes,
    errors: list[dict[str, str]] | None = None,
) -> DeadLetter:
    """Build the record for one refused payload; bytes that are not UTF-8 are kept as base64."""
    assert kind in FAILURE_KINDS, f"unknown failure kind {kind!r}: add it to FAILURE_KINDS"
    kept = payload[:MAX_PAYLOAD_BYTES]
    try:
        text, b64 = kept.decode("utf-8"), None
    except UnicodeDecodeError:
        text, b64 = None, base64.b64encode(kept).decode()
    return DeadLetter(
        kind=kind,
        message=message,
        status=status,
        received_at=received_at,
        errors=errors or [],
        payload=text,
        payload_b64=b64,
        payload_size=len(payload),
        truncated=len(payload) > MAX_PAYLOAD_BYTES,
        component={"name": component, "version": tally.__version__},
    )
