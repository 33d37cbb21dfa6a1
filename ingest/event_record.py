"""The stored event as ingest builds and encodes it, one per accepted beacon.

:class:`tally.schema.PageViewEvent` is the event's definition; this is the same list of fields
as a msgspec struct, built positionally and encoded by msgspec, because per event that is
several times cheaper than a dict or the frozen dataclass. The check below keeps the two in step.
"""

from __future__ import annotations

from typing import Any

import msgspec

from tally.schema import FIELDS, PageViewEvent


class EventRecord(msgspec.Struct, gc=False):
    """One enriched event, fields in schema order (the order of ``tally.schema.FIELDS``)."""

    event_id: str
    type: str
    name: str | None
    site_id: str
    url: str
    hostname: str
    path: str
    referrer: str | None
    title: str | None
    ts_event: int
    ts_sent: int
    ts_received: int
    event_time: int
    screen_w: int | None
    language: str | None
    tz: str | None
    props: dict[str, str]
    engagement_ms: int | None
    load_ms: int | None
    lcp_ms: int | None
    inp_ms: int | None
    cls: float | None
    fcp_ms: int | None
    ttfb_ms: int | None
    scroll_depth: int | None
    visitor_id: str
    client_hash: str
    browser: str | None
    os: str | None
    device: str | None
    is_bot: bool
    country: str | None
    region: str | None
    city: str | None
    source: str | None
    medium: str | None
    channel: str | None
    campaign: str | None
    utm_source: str | None
    utm_medium: str | None
    utm_campaign: str | None
    utm_term: str | None
    utm_content: str | None
    click_id: str | None
    schema_version: int

    def fields(self) -> dict[str, Any]:
        """Field name -> value, e.g. for a dead letter's payload."""
        return msgspec.structs.asdict(self)

    def event(self) -> PageViewEvent:
        """The same event as the shared dataclass."""
        return PageViewEvent(**self.fields())


# The Kafka message value: compact UTF-8 JSON of every field, as PageViewEvent.to_json writes it.
encode_record = msgspec.json.Encoder().encode

assert EventRecord.__struct_fields__ == tuple(FIELDS), "EventRecord must list tally.schema.FIELDS, in order"
