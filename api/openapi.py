"""The Stats API's OpenAPI document, served at ``/openapi.json`` (what schemathesis fuzzes)."""

from __future__ import annotations

from typing import Any

from query.plausible import RANGE_SHORTCUTS
from query.spec import (
    COMPARISONS,
    DIMENSIONS,
    MAX_LIMIT,
    MAX_PROP_KEY,
    METRICS,
    PROPS_PREFIX,
    VITAL_BAND_METRICS,
    VITAL_P75_METRICS,
    VITALS_API_DIMENSIONS,
)
from tally.annotations import MAX_TEXT
from tally.salt_periods import SALT_PERIODS

_FILTER: dict[str, Any] = {
    "type": "array",
    "description": '[operator, dimension, [values]] or ["and"|"or", [filters]] or ["not", filter]',
    "minItems": 2,
    "maxItems": 4,
}


VITALS_NOTE = (
    f"Core Web Vitals ({', '.join(VITAL_P75_METRICS)}: p75, approximate; {', '.join(VITAL_BAND_METRICS)}: % of"
    " measured page views, exact) and scroll_depth (average %, exact) are asked in a query of their own, with no"
    f" dimension or one of {', '.join(VITALS_API_DIMENSIONS)}; see docs/API.md"
)


_DIMENSION: dict[str, Any] = {
    "oneOf": [
        {"type": "string", "enum": list(DIMENSIONS)},
        {"type": "string", "pattern": f"^{PROPS_PREFIX}.{{1,{MAX_PROP_KEY}}}$", "description": "a custom property"},
    ]
}


_ANNOTATION: dict[str, Any] = {
    "type": "object",
    "required": ["site_id", "date", "text"],
    "properties": {
        "site_id": {"type": "string"},
        "date": {"type": "string", "format": "date"},
        "text": {"type": "string", "maxLength": MAX_TEXT},
    },
    "additionalProperties": False,
}


def _error(description: str) -> dict[str, Any]:
    schema = {
        "type": "object",
        "required": ["error"],
        "properties": {"error": {"type": "string"}, "part": {"type": "string"}},
    }
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def openapi_spec() -> dict[str, Any]:
    query = {
        "type": "object",
        "required": ["site_id", "metrics", "date_range"],
        "properties": {
            "site_id": {"type": "string"},
            "date_range": {
                "oneOf": [
                    {"type": "string", "enum": list(RANGE_SHORTCUTS)},
                    {"type": "array", "items": {"type": "string", "format": "date"}, "minItems": 2, "maxItems": 2},
                    {"type": "array", "items": {"type": "string", "format": "date-time"}, "minItems": 2, "maxItems": 2},
                ]
            },
            "metrics": {
                "type": "array",
                "items": {"type": "string", "enum": list(METRICS)},
                "minItems": 1,
                "description": VITALS_NOTE,
            },
            "dimensions": {"type": "array", "items": _DIMENSION, "maxItems": 4},
            "filters": {"type": "array", "items": _FILTER},
            "order_by": {
                "type": "array",
                "items": {"type": "array", "minItems": 2, "maxItems": 2},
            },
            "include": {
                "type": "object",
                "properties": {
                    "time_labels": {"type": "boolean"},
                    "total_rows": {"type": "boolean"},
                    "compare": {
                        "oneOf": [
                            {"type": "string", "enum": list(COMPARISONS)},
                            {
                                "type": "array",
                                "items": {"type": "string", "format": "date"},
                                "minItems": 2,
                                "maxItems": 2,
                            },
                        ]
                    },
                },
            },
            "pagination": {
                "type": "object",
                "properties": {
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT},
                    "offset": {"type": "integer", "minimum": 0},
                },
            },
        },
    }
    answer = {
        "type": "object",
        "required": ["results", "meta", "query"],
        "properties": {
            "results": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "dimensions": {"type": "array"},
                        "metrics": {"type": "array"},
                        "comparison": {"type": "object"},
                    },
                },
            },
            "meta": {"type": "object"},
            "query": {"type": "object"},
        },
    }
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "Tally Stats API",
            "version": "2",
            "description": "Plausible Stats API v2 compatible; see docs/API.md.",
        },
        "components": {"securitySchemes": {"key": {"type": "http", "scheme": "bearer"}}},
        "security": [{"key": []}],
        "paths": {
            "/api/v2/query": {
                "post": {
                    "summary": "Metrics over a date range, optionally by a dimension and filtered",
                    "requestBody": {"required": True, "content": {"application/json": {"schema": query}}},
                    "responses": {
                        "200": {"description": "The answer", "content": {"application/json": {"schema": answer}}},
                        "400": _error("A query Tally cannot answer; `part` names the key at fault"),
                        "401": _error("No API key, or an unknown or revoked one"),
                        "403": _error("The key may not read this site"),
                        "413": _error("The body is too large"),
                        "429": _error("Over the key's hourly limit, or its share of raw questions; see Retry-After"),
                        "503": _error("Every raw-question slot of this process is busy; see Retry-After"),
                    },
                }
            },
            **_site_paths(),
            "/api/v1/annotations": {
                "get": {
                    "summary": "The annotations of a site the key may read",
                    "parameters": [{"name": "site_id", "in": "query", "required": True, "schema": {"type": "string"}}],
                    "responses": {
                        "200": {"description": "The site's annotations"},
                        "400": _error("An unknown site"),
                        "401": _error("No API key, or an unknown or revoked one"),
                        "403": _error("The key may not read this site"),
                        "429": _error("Over the key's hourly limit; see Retry-After"),
                    },
                },
                "post": {
                    "summary": "Add an annotation to a site's day (shown on its time series)",
                    "requestBody": {"required": True, "content": {"application/json": {"schema": _ANNOTATION}}},
                    "responses": {
                        "201": {"description": "The annotation made"},
                        "400": _error("Not a site's day with a short text; `part` names the field"),
                        "401": _error("No API key, or an unknown or revoked one"),
                        "403": _error("The key may not read this site"),
                        "413": _error("The body is too large"),
                        "429": _error("Over the key's hourly limit; see Retry-After"),
                    },
                },
            },
        },
    }


_SITE = {
    "type": "object",
    "required": ["site_id", "domains"],
    "additionalProperties": False,
    "properties": {
        "site_id": {"type": "string", "example": "example.com"},
        "domains": {"type": "array", "items": {"type": "string"}, "example": ["example.com", "www.example.com"]},
        "salt_period": {"type": "string", "enum": list(SALT_PERIODS), "default": "day"},
        "hash_routing": {"type": "boolean", "default": False},
        "query_params": {"type": "array", "items": {"type": "string"}},
        "goals": {"type": "array", "items": {"type": "string"}, "example": ["event:signup", "page:/pricing"]},
        "client_pageviews_per_hour": {"type": "integer", "minimum": 0, "default": 0},
        "honour_opt_out": {"type": "boolean", "default": False},
        "timezone": {"type": "string", "default": "UTC", "example": "Europe/Berlin"},
        "embed_origins": {"type": "array", "items": {"type": "string"}, "example": ["https://www.example.com"]},
    },
}


def _site_paths() -> dict[str, Any]:
    """``/api/v1/sites``: an admin key adds, changes and removes sites (api/sites.py)."""
    gate = {
        "401": _error("No API key, or an unknown or revoked one"),
        "403": _error("The key is not an admin key (tally apikey create --admin)"),
        "429": _error("Over the key's hourly limit; see Retry-After"),
        "503": _error("The sites topic cannot be read or written (Kafka down); nothing changed"),
    }
    body = {"required": True, "content": {"application/json": {"schema": _SITE}}}
    site_id = [{"name": "site_id", "in": "path", "required": True, "schema": {"type": "string"}}]
    return {
        "/api/v1/sites": {
            "get": {
                "summary": "Every configured site, and the removed ones",
                "responses": {"200": {"description": "The sites"}, **gate},
            },
            "post": {
                "summary": "Add a site; ingest accepts its events within seconds",
                "requestBody": body,
                "responses": {
                    "201": {"description": "The site added"},
                    "400": _error("Not a valid site; the message names the field"),
                    "409": _error("The site is configured already; PUT changes it"),
                    **gate,
                },
            },
        },
        "/api/v1/sites/{site_id}": {
            "put": {
                "summary": "Write a site whole (added if new)",
                "parameters": site_id,
                "requestBody": body,
                "responses": {
                    "200": {"description": "The site written"},
                    "400": _error("Not a valid site; the message names the field"),
                    **gate,
                },
            },
            "delete": {
                "summary": "Remove a site: ingest refuses its events; its stored data stays",
                "parameters": site_id,
                "responses": {"200": {"description": "The site removed"}, "404": _error("No such site"), **gate},
            },
        },
    }
