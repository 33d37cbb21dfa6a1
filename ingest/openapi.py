"""The OpenAPI document served at ``/openapi.json`` (the contract schemathesis fuzzes).

It is served on the public port, so it holds only what the public endpoint shows anyway: its
routes, the beacon's wire format (ingest/PAYLOAD.md) and Plausible's body (docs/EVENTS-API.md).
Its version is that of the wire format, not Tally's release, so it tells no one which build
runs; ``/metrics`` is not in it (loopback only).
"""

from __future__ import annotations

from typing import Any

from ingest.beacon import MAX_PROP_VALUE, MAX_PROPS, MAX_TEXT, BeaconSchema
from ingest.plausible_events import MAX_ENGAGEMENT_MS
from tally.schema import SCHEMA_VERSION


def _error(description: str) -> dict[str, Any]:
    schema = {
        "type": "object",
        "required": ["error", "message"],
        "properties": {
            "error": {"type": "string"},
            "message": {"type": "string"},
            "errors": {"type": "array", "items": {"type": "object"}},
        },
    }
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def plausible_event_schema() -> dict[str, Any]:
    """Plausible's Events API body as its tracker sends it (short keys); docs/EVENTS-API.md has the long form."""
    text = {"type": "string", "maxLength": MAX_TEXT}
    return {
        "type": "object",
        "title": "PlausibleEvent",
        "description": "One event in Plausible's Events API body (ingest/plausible_events.py, docs/EVENTS-API.md);"
        " the long keys name, url, domain, referrer, props, interactive, revenue are read too.",
        "required": ["n", "u", "d"],
        "properties": {
            "n": {"type": "string", "minLength": 1, "maxLength": MAX_PROP_VALUE},
            "u": text,
            "d": {"type": "string", "minLength": 1, "maxLength": 253},
            "r": text | {"nullable": True},
            "p": {
                "type": "object",
                "maxProperties": MAX_PROPS,
                "additionalProperties": {"type": "string", "maxLength": MAX_PROP_VALUE},
            },
            "i": {"type": "boolean"},
            "sd": {"type": "integer", "minimum": 0, "maximum": 100},
            "e": {"type": "integer", "minimum": 0, "maximum": MAX_ENGAGEMENT_MS},
        },
    }


def openapi_spec(*, max_batch: int) -> dict[str, Any]:
    beacon = BeaconSchema.model_json_schema()
    body_schema = {
        "oneOf": [
            {"$ref": "#/components/schemas/Beacon"},
            {"type": "array", "items": {"$ref": "#/components/schemas/Beacon"}, "minItems": 1, "maxItems": max_batch},
            {"$ref": "#/components/schemas/PlausibleEvent"},
        ]
    }
    accepted = {"type": "object", "properties": {"accepted": {"type": "integer"}, "rejected": {"type": "array"}}}
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "Tally ingest",
            "version": str(SCHEMA_VERSION),
            "description": "Beacon endpoint; wire format in ingest/PAYLOAD.md, Plausible's body in docs/EVENTS-API.md.",
        },
        "paths": {
            "/api/event": {
                "post": {
                    "summary": "Record one event or a batch; or one event in Plausible's Events API body",
                    "requestBody": {
                        "required": True,
                        "content": {"text/plain": {"schema": body_schema}, "application/json": {"schema": body_schema}},
                    },
                    "responses": {
                        "202": {
                            "description": "Accepted (safe in Kafka or the local spool)",
                            "content": {"application/json": {"schema": accepted}},
                        },
                        "400": _error("Malformed JSON or empty batch"),
                        "403": _error("Unknown site, or a page host that does not belong to the site"),
                        "413": _error("Body or batch too large"),
                        "415": _error("Unsupported content type"),
                        "422": _error("Invalid fields"),
                        "429": _error("Rate limited; see Retry-After"),
                        "503": _error(
                            "Kafka is away and the spool cannot store the events (disk full); see Retry-After"
                        ),
                    },
                }
            },
            "/api/event.gif": {
                "get": {
                    "summary": "No-JavaScript fallback: a page view from query parameters, answered with a 1x1 GIF",
                    "parameters": [
                        {"name": "s", "in": "query", "required": True, "schema": {"type": "string"}},
                        {"name": "u", "in": "query", "required": False, "schema": {"type": "string"}},
                        {"name": "r", "in": "query", "required": False, "schema": {"type": "string"}},
                    ],
                    "responses": {
                        code: {"description": "1x1 GIF", "content": {"image/gif": {}}}
                        for code in ("202", "400", "403", "422", "429", "503")
                    },
                }
            },
            "/healthz": {
                "get": {
                    "summary": "Liveness, and whether events wait in the spool",
                    "responses": {
                        "200": {
                            "description": "status: ok (nothing waits for Kafka), draining (the spool is being"
                            " replayed) or degraded (events wait in the spool and are not draining)"
                        }
                    },
                }
            },
            "/t.js": {"get": {"summary": "The tracking snippet", "responses": {"200": {"description": "JavaScript"}}}},
        },
        "components": {"schemas": {"Beacon": beacon, "PlausibleEvent": plausible_event_schema()}},
    }
