"""PageViewEvent, schema version 1: the immutable fact every part of Tally shares.

The field list below is the single definition. The Kafka message (JSON), the raw Delta
table (Spark DDL and Arrow schema) and the ingest enrichment are all derived from it.
Evolution is additive only: new optional fields, never renamed or retyped ones, and
readers ignore fields they do not know.
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Literal

SCHEMA_VERSION = 1

# "vitals": Core Web Vitals and scroll depth of one page view (tally/vitals.py); like "engagement",
# a beacon about a page view, neither a page view nor a custom event.
EventType = Literal["pageview", "event", "engagement", "vitals"]
EVENT_TYPES: tuple[str, ...] = ("pageview", "event", "engagement", "vitals")

# name -> (Spark SQL type, who sets it). The order is the column order of raw.pageviews.
FIELDS: dict[str, tuple[str, str]] = {
    "event_id": ("STRING", "tracker"),
    "type": ("STRING", "tracker"),
    "name": ("STRING", "tracker"),
    "site_id": ("STRING", "tracker"),
    "url": ("STRING", "tracker"),
    "hostname": ("STRING", "ingest"),
    "path": ("STRING", "ingest"),
    "referrer": ("STRING", "tracker"),
    "title": ("STRING", "tracker"),
    "ts_event": ("BIGINT", "tracker"),
    "ts_sent": ("BIGINT", "tracker"),
    "ts_received": ("BIGINT", "ingest"),
    "event_time": ("BIGINT", "ingest"),
    "screen_w": ("INT", "tracker"),
    "language": ("STRING", "tracker"),
    "tz": ("STRING", "tracker"),
    "props": ("MAP<STRING,STRING>", "tracker"),
    "engagement_ms": ("BIGINT", "tracker"),
    "load_ms": ("BIGINT", "tracker"),
    # Core Web Vitals and scroll depth (tally/vitals.py): on "vitals" events, scroll depth on "engagement" too.
    "lcp_ms": ("BIGINT", "tracker"),
    "inp_ms": ("BIGINT", "tracker"),
    "cls": ("DOUBLE", "tracker"),
    "fcp_ms": ("BIGINT", "tracker"),
    "ttfb_ms": ("BIGINT", "tracker"),
    "scroll_depth": ("INT", "tracker"),
    "visitor_id": ("STRING", "ingest"),
    "client_hash": ("STRING", "ingest"),
    "browser": ("STRING", "ingest"),
    "os": ("STRING", "ingest"),
    "device": ("STRING", "ingest"),
    "is_bot": ("BOOLEAN", "ingest"),
    "country": ("STRING", "ingest"),
    "region": ("STRING", "ingest"),  # with geo.city_db only: ISO 3166-2 (DE-BE)
    "city": ("STRING", "ingest"),  # with geo.city_db only: English name
    "source": ("STRING", "ingest"),
    "medium": ("STRING", "ingest"),
    "channel": ("STRING", "ingest"),
    "campaign": ("STRING", "ingest"),
    "utm_source": ("STRING", "ingest"),
    "utm_medium": ("STRING", "ingest"),
    "utm_campaign": ("STRING", "ingest"),
    "utm_term": ("STRING", "ingest"),
    "utm_content": ("STRING", "ingest"),
    "click_id": ("STRING", "ingest"),
    "schema_version": ("INT", "ingest"),
}

# Columns the raw table adds to every event: its partition and where it came from in Kafka,
# so that the archive can be reconciled against the log offset by offset.
RAW_EXTRA_FIELDS: dict[str, str] = {
    "event_date": "DATE",
    "kafka_partition": "INT",
    "kafka_offset": "BIGINT",
}


def spark_ddl(fields: dict[str, tuple[str, str]] = FIELDS) -> str:
    """The event's Spark SQL DDL (``"event_id STRING, …"``), for ``from_json`` and table creation."""
    return ", ".join(f"`{name}` {sql_type}" for name, (sql_type, _) in fields.items())


@dataclass(frozen=True)
class PageViewEvent:
    """One accepted, enriched event. Times are epoch milliseconds; ``event_time`` is skew-corrected."""

    event_id: str
    type: str
    site_id: str
    url: str
    hostname: str
    path: str
    ts_event: int
    ts_sent: int
    ts_received: int
    event_time: int
    visitor_id: str
    client_hash: str = ""
    name: str | None = None
    referrer: str | None = None
    title: str | None = None
    screen_w: int | None = None
    language: str | None = None
    tz: str | None = None
    props: dict[str, str] = field(default_factory=dict)
    engagement_ms: int | None = None
    load_ms: int | None = None
    lcp_ms: int | None = None
    inp_ms: int | None = None
    cls: float | None = None
    fcp_ms: int | None = None
    ttfb_ms: int | None = None
    scroll_depth: int | None = None
    browser: str | None = None
    os: str | None = None
    device: str | None = None
    is_bot: bool = False
    country: str | None = None
    region: str | None = None
    city: str | None = None
    source: str | None = None
    medium: str | None = None
    channel: str | None = None
    campaign: str | None = None
    utm_source: str | None = None
    utm_medium: str | None = None
    utm_campaign: str | None = None
    utm_term: str | None = None
    utm_content: str | None = None
    click_id: str | None = None
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> bytes:
        """The Kafka message value: compact UTF-8 JSON with every field."""
        # vars(), not dataclasses.asdict(): asdict deep-copies every field, several times slower.
        return json.dumps(vars(self), separators=(",", ":"), ensure_ascii=False).encode()

    @classmethod
    def from_json(cls, raw: bytes | str) -> PageViewEvent:
        """Decode a Kafka message value; unknown (newer, additive) fields are ignored."""
        return cls(**decode_event(raw))


_PYTHON_TYPES: dict[str, type] = {
    "STRING": str,
    "BIGINT": int,
    "INT": int,
    "BOOLEAN": bool,
    "DOUBLE": float,
    "MAP<STRING,STRING>": dict,
}
_EXPECTED: dict[str, type] = {name: _PYTHON_TYPES[sql] for name, (sql, _) in FIELDS.items()}
_REQUIRED = frozenset(f.name for f in fields(PageViewEvent) if f.default is MISSING and f.default_factory is MISSING)
_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(PageViewEvent) if f.default is not MISSING}


def required_fields() -> frozenset[str]:
    """Fields every v1 event must carry (no default)."""
    return _REQUIRED


def schema_defaults() -> dict[str, Any]:
    """Defaults of the optional fields that have a non-null one (e.g. ``is_bot=False``)."""
    return {k: v for k, v in _DEFAULTS.items() if v is not None}


def _whole_double(name: str, value: int) -> float:
    """A DOUBLE written without a fraction (``1``, as JavaScript writes ``1.0``), as a float."""
    try:
        return float(value)
    except OverflowError:  # 10**400 is valid JSON, and no DOUBLE
        raise ValueError(
            f"field {name!r}: expected a finite DOUBLE, got an integer of {len(str(value))} digits"
        ) from None


def decode_event(raw: bytes | str) -> dict[str, Any]:
    """Decode and type-check a v1 event into a dict of every field (defaults filled in).

    Raises TypeError or ValueError for anything that is not a v1 event. Types are exact
    (``true`` is not an int), except that a DOUBLE may be written as a whole number (``1``, as
    JSON encoders outside Python write ``1.0``) and must be finite (no ``NaN``, no ``Infinity``);
    unknown fields from newer schema versions are ignored. The archiver uses the dict directly:
    building the frozen dataclass costs more than decoding.
    """
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise TypeError(f"expected a JSON object, got {type(data).__name__}")
    out: dict[str, Any] = {}
    for name, expected in _EXPECTED.items():
        value = data.get(name)
        if value is None:
            if name in _REQUIRED:
                raise TypeError(f"field {name!r} is required")
            value = _DEFAULTS.get(name)
        elif type(value) is not expected:
            if expected is not float or type(value) is not int:
                raise TypeError(f"field {name!r}: expected {FIELDS[name][0]}, got {type(value).__name__}")
            value = _whole_double(name, value)
        elif isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"field {name!r}: expected a finite DOUBLE, got {value}")
        out[name] = value
    props = out["props"]
    if props is None:
        out["props"] = {}
    elif not all(type(k) is str and type(v) is str for k, v in props.items()):
        raise TypeError("field 'props': expected MAP<STRING,STRING>")
    return out


assert set(FIELDS) == {f for f in PageViewEvent.__dataclass_fields__}, (
    "schema.FIELDS and PageViewEvent must list the same fields"
)
