"""The tracker's wire format (see PAYLOAD.md beside this file) and its validation.

Pure: no I/O. Turns request bytes into validated beacons, or into a :class:`Rejection`
whose reason names the field and what is wrong with it. A body of valid beacons (nearly every
body) is decoded and checked in one pass by msgspec; any other body takes the slow path,
``json`` and pydantic, which keeps the valid items and names every field at fault in the others.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec
from msgspec import Meta
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from tally.schema import EVENT_TYPES, SCHEMA_VERSION
from tally.vitals import SCROLL_DEPTH_COLUMN, SCROLL_DEPTH_KEY, SCROLL_DEPTH_MAX, VITALS, VITALS_BY_NAME, VITALS_TYPE

MAX_TEXT = 2000
MAX_PROPS = 20
MAX_PROP_KEY = 64
MAX_PROP_VALUE = 256
FORMULA_PREFIXES = ("=", "+", "-", "@")
# event_time = te + (received - ts), so these bound it to [received - 7 days, received + 1 minute]
# whatever the device clock says. Without them one beacon could date an event in year -1000 or
# 5000, which the archiver's two decoders date differently and `tally audit` cannot read, and
# the streaming watermark would jump past every other visitor's events (then dropped as late).
MAX_SEND_DELAY_MS = 7 * 86_400_000  # how long an event may wait on the device before it is sent
MAX_CLOCK_SLIP_MS = 60_000  # te is read before ts on the same clock; tolerate a little slip

# Core Web Vitals (tally/vitals.py): beacon keys, only on "vitals" events; scroll depth on these too.
VITAL_KEYS: tuple[str, ...] = tuple(v.name for v in VITALS)
SCROLL_DEPTH_TYPES: tuple[str, ...] = (VITALS_TYPE, "engagement")
VITALS_AND_SCROLL_KEYS: tuple[str, ...] = (*VITAL_KEYS, SCROLL_DEPTH_KEY)
_LCP, _INP, _CLS, _FCP, _TTFB = (VITALS_BY_NAME[key] for key in VITAL_KEYS)

# Short wire keys -> readable names, for error messages.
WIRE_NAMES: dict[str, str] = {
    "v": "schema version",
    "id": "event_id",
    "k": "type",
    "n": "name",
    "s": "site_id",
    "u": "url",
    "r": "referrer",
    "ti": "title",
    "te": "ts_event",
    "ts": "ts_sent",
    "w": "screen_w",
    "l": "language",
    "z": "tz",
    "p": "props",
    "e": "engagement_ms",
    "ld": "load_ms",
    **{v.name: v.column for v in VITALS},
    SCROLL_DEPTH_KEY: SCROLL_DEPTH_COLUMN,
}


def neutralise_formula(text: str) -> str:
    """Prefix text that a spreadsheet would run as a formula (``=cmd()``) with a quote."""
    return "'" + text if text.startswith(FORMULA_PREFIXES) else text


def check_sent_time(ts_event: int, ts_sent: int) -> None:
    """``ts`` must be at most 7 days after ``te`` and at most 1 minute before it (see the bounds above)."""
    if not -MAX_CLOCK_SLIP_MS <= ts_sent - ts_event <= MAX_SEND_DELAY_MS:
        raise ValueError("must be at most 7 days after te (ts_event) and at most 1 minute before it")


def check_props(props: dict[str, Any]) -> None:
    """Property names of 1-64 characters that can be stored as text, values of at most 256 characters."""
    for key, item in props.items():
        if not 0 < len(key) <= MAX_PROP_KEY:
            raise ValueError(f"property names must be 1-{MAX_PROP_KEY} characters")
        if not key.isascii():
            try:
                key.encode()
            except UnicodeEncodeError:  # a lone surrogate ("\\ud800"): JSON allows it, UTF-8 cannot store it
                raise ValueError("property names must be valid Unicode text") from None
        if len(str(item)) > MAX_PROP_VALUE:
            raise ValueError(f"property {key!r}: values must be at most {MAX_PROP_VALUE} characters")


NOT_UNICODE = "must be valid Unicode text (a lone surrogate such as \\ud800 cannot be stored)"


def undecodable_text(decoded: Any, where: str = "") -> str | None:
    """The path of the first key or string in a decoded JSON body that is not valid Unicode text
    (a lone surrogate such as ``"\\ud800"``: JSON allows it, UTF-8 cannot store it), else None.

    ``json`` keeps such escapes as they came, and every later step (the stored event, the dead
    letter, the answer) writes UTF-8, so one in any field, property values included, is refused
    before any of them; the path names the field (``p.k``, ``[2].u``). Walked without recursion:
    the body may nest as deep as the decoder allows."""
    pending: list[tuple[str, Any]] = [(where, decoded)]
    while pending:
        path, value = pending.pop()
        if isinstance(value, str):
            if not value.isascii() and not _encodes(value):
                return path or "body"
        elif isinstance(value, dict):
            for key, item in value.items():
                name = str(key)
                child = f"{path}.{name}" if path else name
                if not name.isascii() and not _encodes(name):
                    return (f"{path}." if path else "") + name.encode("utf-8", "backslashreplace").decode()
                pending.append((child, item))
        elif isinstance(value, list):
            pending.extend((f"{path}[{i}]", item) for i, item in enumerate(value))
    return None


def _encodes(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def vitals_rule_errors(kind: str, given: dict[str, object]) -> list[tuple[str, str]]:
    """(wire key, what to do) for each rule of the vitals keys an event breaks; ``given``: the
    vitals and scroll-depth keys it carries, by wire key, with their (valid) values.

    The rules need the event type, so they are checked after each key's own type and range.
    """
    errors = []
    if kind != VITALS_TYPE:
        errors += [
            (key, f"only vitals events carry Core Web Vitals; send {key} with k: {VITALS_TYPE}")
            for key in VITAL_KEYS
            if given.get(key) is not None
        ]
    if given.get(SCROLL_DEPTH_KEY) is not None and kind not in SCROLL_DEPTH_TYPES:
        errors.append(
            (SCROLL_DEPTH_KEY, f"only {' and '.join(SCROLL_DEPTH_TYPES)} events carry a scroll depth; not {kind}")
        )
    if kind == VITALS_TYPE and all(given.get(key) is None for key in VITALS_AND_SCROLL_KEYS):
        errors.append(("k", f"a vitals event carries at least one of {', '.join(VITAL_KEYS)}, {SCROLL_DEPTH_KEY}"))
    return errors


UUID_HEX = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
Text = Annotated[str, Meta(max_length=MAX_TEXT)]
PropValue = Annotated[str, Meta(max_length=MAX_PROP_VALUE)] | int | float | bool


class Beacon(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One valid event as the tracker sends it (schema version 1), decoded straight from JSON.

    :class:`BeaconSchema` states the same rules for pydantic, which names every field at fault;
    ``tests/unit/test_beacon_rules.py`` checks that the two accept exactly the same beacons.
    """

    v: Annotated[int, Meta(ge=1, le=SCHEMA_VERSION)] = SCHEMA_VERSION
    id: Annotated[str, Meta(pattern=rf"\A{UUID_HEX}\Z")]
    k: str = "pageview"
    n: Annotated[str, Meta(min_length=1, max_length=MAX_PROP_VALUE)] | None = None
    s: Annotated[str, Meta(min_length=1, max_length=253)]
    u: Annotated[str, Meta(min_length=1, max_length=MAX_TEXT)]
    r: Text | None = None
    ti: Text | None = None
    te: Annotated[int, Meta(ge=0, le=10**14)]
    ts: Annotated[int, Meta(ge=0, le=10**14)]
    w: Annotated[int, Meta(ge=0, le=100_000)] | None = None
    l: Annotated[str, Meta(max_length=35)] | None = None  # noqa: E741 - wire key
    z: Annotated[str, Meta(max_length=64)] | None = None
    p: Annotated[dict[str, PropValue], Meta(max_length=MAX_PROPS)] = msgspec.field(default_factory=dict)
    e: Annotated[int, Meta(ge=0, le=86_400_000)] | None = None
    ld: Annotated[int, Meta(ge=0, le=3_600_000)] | None = None
    # Core Web Vitals and scroll depth: bounds from tally/vitals.py; rules in vitals_rule_errors.
    lcp: Annotated[int, Meta(ge=0, le=int(_LCP.upper))] | None = None
    inp: Annotated[int, Meta(ge=0, le=int(_INP.upper))] | None = None
    cls: Annotated[float, Meta(ge=0, le=_CLS.upper)] | None = None
    fcp: Annotated[int, Meta(ge=0, le=int(_FCP.upper))] | None = None
    ttfb: Annotated[int, Meta(ge=0, le=int(_TTFB.upper))] | None = None
    sd: Annotated[int, Meta(ge=0, le=SCROLL_DEPTH_MAX)] | None = None

    def __post_init__(self) -> None:
        # msgspec turns a ValueError here into a validation error of the whole document.
        if self.k not in EVENT_TYPES:
            raise ValueError(f"k: must be one of {', '.join(EVENT_TYPES)}")
        check_sent_time(self.te, self.ts)
        if self.k == VITALS_TYPE or any(getattr(self, key) is not None for key in VITALS_AND_SCROLL_KEYS):
            given = {key: getattr(self, key) for key in VITALS_AND_SCROLL_KEYS}
            for key, error in vitals_rule_errors(self.k, given):
                raise ValueError(f"{key}: {error}")
            if self.cls is not None:
                msgspec.structs.force_setattr(self, "cls", self.cls + 0.0)  # -0.0 is stored as 0.0
        if self.p:
            check_props(self.p)
        if self.n is not None and self.n.startswith(FORMULA_PREFIXES):
            msgspec.structs.force_setattr(self, "n", neutralise_formula(self.n))

    def props_as_text(self) -> dict[str, str]:
        """Properties as the string map the event stores, formula prefixes neutralised."""
        return {neutralise_formula(k): neutralise_formula(str(v)) for k, v in self.p.items()}


class BeaconSchema(BaseModel):
    """The rules of :class:`Beacon` for pydantic: field-level errors, and the OpenAPI schema."""

    model_config = ConfigDict(
        extra="ignore",
        frozen=True,
        strict=True,
        title="Beacon",
        json_schema_extra={"description": "One event as the tracker sends it (schema version 1)."},
    )

    v: int = Field(default=SCHEMA_VERSION, ge=1, le=SCHEMA_VERSION)
    id: str = Field(pattern=f"^{UUID_HEX}$")
    k: str = "pageview"
    n: str | None = Field(default=None, min_length=1, max_length=MAX_PROP_VALUE)
    s: str = Field(min_length=1, max_length=253)
    u: str = Field(min_length=1, max_length=MAX_TEXT)
    r: str | None = Field(default=None, max_length=MAX_TEXT)
    ti: str | None = Field(default=None, max_length=MAX_TEXT)
    te: int = Field(ge=0, le=10**14)
    ts: int = Field(ge=0, le=10**14)
    w: int | None = Field(default=None, ge=0, le=100_000)
    l: str | None = Field(default=None, max_length=35)  # noqa: E741 - wire key
    z: str | None = Field(default=None, max_length=64)
    p: dict[str, str | int | float | bool] = Field(default_factory=dict, max_length=MAX_PROPS)
    e: int | None = Field(default=None, ge=0, le=86_400_000)
    ld: int | None = Field(default=None, ge=0, le=3_600_000)
    lcp: int | None = Field(default=None, ge=0, le=int(_LCP.upper))
    inp: int | None = Field(default=None, ge=0, le=int(_INP.upper))
    cls: float | None = Field(default=None, ge=0, le=_CLS.upper, allow_inf_nan=False)
    fcp: int | None = Field(default=None, ge=0, le=int(_FCP.upper))
    ttfb: int | None = Field(default=None, ge=0, le=int(_TTFB.upper))
    sd: int | None = Field(default=None, ge=0, le=SCROLL_DEPTH_MAX)

    @field_validator("k")
    @classmethod
    def _known_type(cls, value: str) -> str:
        if value not in EVENT_TYPES:
            raise ValueError(f"must be one of {', '.join(EVENT_TYPES)}")
        return value

    @field_validator("ts")
    @classmethod
    def _sent_after_the_event(cls, value: int, info: ValidationInfo) -> int:
        event = info.data.get("te")
        if event is not None:
            check_sent_time(event, value)
        return value

    @field_validator("p")
    @classmethod
    def _bounded_props(cls, value: dict[str, Any]) -> dict[str, Any]:
        check_props(value)
        return value

    @field_validator(*VITALS_AND_SCROLL_KEYS)
    @classmethod
    def _on_an_event_type_that_carries_it(cls, value: float | None, info: ValidationInfo) -> float | None:
        kind = info.data.get("k")  # absent when k itself is invalid: that error is named already
        if value is None or kind is None:
            return value
        key_given = str(info.field_name)
        for key, error in vitals_rule_errors(kind, {key_given: value}):
            if key == key_given:
                raise ValueError(error)
        return value + 0.0 if key_given == _CLS.name else value  # -0.0 is stored as 0.0

    @model_validator(mode="after")
    def _vitals_with_a_measure(self) -> BeaconSchema:
        # Only once every field is valid, so that a refused lcp is not also reported as missing.
        if self.k == VITALS_TYPE:
            given = {key: getattr(self, key) for key in VITALS_AND_SCROLL_KEYS}
            for key, error in vitals_rule_errors(self.k, given):
                raise PydanticCustomError("vitals_rule", error, {"field": key})
        return self

    def beacon(self) -> Beacon:
        """The valid beacon these fields make (its name neutralised)."""
        return Beacon(**self.model_dump())


@dataclass(frozen=True)
class Rejection:
    """Why a request was refused: HTTP status, failure kind (closed set) and field errors."""

    status: int
    kind: str
    message: str
    errors: tuple[dict[str, str], ...] = ()
    retry_after_s: int = 0

    def body(self) -> dict[str, Any]:
        """JSON body for the client."""
        out: dict[str, Any] = {"error": self.kind, "message": self.message}
        if self.errors:
            out["errors"] = list(self.errors)
        if self.retry_after_s:
            out["retry_after_s"] = self.retry_after_s
        return out


def _field_errors(error: ValidationError, index: int | None) -> tuple[dict[str, str], ...]:
    found = []
    for item in error.errors(include_url=False):
        loc = [str(p) for p in item["loc"]]
        # A rule of several fields (a model validator) names the field at fault in its context.
        wire = loc[0] if loc else str((item.get("ctx") or {}).get("field", ""))
        label = f"{wire} ({WIRE_NAMES[wire]})" if wire in WIRE_NAMES else ".".join(loc)
        where = f"[{index}]." if index is not None else ""
        found.append({"field": where + label, "error": item["msg"]})
    return tuple(found)


@dataclass(frozen=True)
class ParsedBody:
    """A decoded request: the valid beacons, and each invalid item with its field errors.

    A batch is not all-or-nothing: valid events in it are kept, so one bad item never
    costs the others.
    """

    beacons: list[Beacon]
    invalid: list[tuple[Any, Rejection]]
    is_batch: bool


_DECODE = msgspec.json.Decoder(Beacon | list[Beacon]).decode
# Python's json refuses an integer of more digits than its int conversion limit (a 400, for every key,
# ingest/PAYLOAD.md); msgspec skips one in a field a beacon does not have. A body holding such a run of
# digits goes to the slow path, which says so; only a body longer than the limit can hold one.
_INT_DIGITS = sys.get_int_max_str_digits()
_LONG_NUMBER = re.compile(rb"[0-9]{%d}" % (_INT_DIGITS + 1)) if _INT_DIGITS else None


def parse_valid_body(body: bytes, *, max_batch: int) -> ParsedBody | None:
    """The fast path: a body whose every item is a valid beacon, decoded and checked in one pass.

    None for any other body: :func:`parse_item_by_item` then says what is wrong with it.
    """
    if _LONG_NUMBER is not None and len(body) > _INT_DIGITS and _LONG_NUMBER.search(body):
        return None
    try:
        decoded = _DECODE(body)
    except (ValueError, RecursionError):  # msgspec's errors are ValueErrors
        return None
    if isinstance(decoded, Beacon):
        return ParsedBody([decoded], [], False)
    if not decoded or len(decoded) > max_batch:
        return None
    return ParsedBody(decoded, [], True)


def parse_item_by_item(body: bytes, *, max_batch: int) -> ParsedBody | Rejection:
    """The slow path: ``json``, then pydantic per item, keeping valid items and naming every bad field."""
    try:
        decoded = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        return Rejection(400, "malformed_json", f"the body is not valid JSON: {e}")
    except ValueError:  # a number of over 4,300 digits: Python's int conversion limit, not a JSON error
        return Rejection(400, "malformed_json", "the body holds a number too long to read; send numbers as text")
    except RecursionError:  # e.g. 60 KB of "[": deeper than Python's decoder can go
        return Rejection(400, "malformed_json", "the body's JSON is nested too deeply; send one object or an array")
    is_batch = isinstance(decoded, list)
    items = decoded if is_batch else [decoded]
    if not items:
        return Rejection(400, "empty_batch", "the batch array is empty")
    if len(items) > max_batch:
        return Rejection(413, "batch_too_large", f"at most {max_batch} events per request, got {len(items)}")
    parsed = ParsedBody([], [], is_batch)
    for i, item in enumerate(items):
        index = i if is_batch else None
        if not isinstance(item, dict):
            where = f"[{i}]" if is_batch else "body"
            error = {"field": where, "error": "expected a JSON object"}
            parsed.invalid.append((item, Rejection(422, "invalid_event", "not an event object", (error,))))
            continue
        # Only the fields a beacon has: others are ignored, as the fast path ignores them.
        known = {key: value for key, value in item.items() if key in BeaconSchema.model_fields}
        fault = undecodable_text(known, f"[{i}]" if is_batch else "")
        if fault is not None:
            error = {"field": fault, "error": NOT_UNICODE}
            parsed.invalid.append((item, Rejection(422, "invalid_event", f"{fault}: {NOT_UNICODE}", (error,))))
            continue
        try:
            parsed.beacons.append(BeaconSchema.model_validate(item).beacon())
        except ValidationError as e:
            errors = _field_errors(e, index)
            parsed.invalid.append((item, Rejection(422, "invalid_event", "one or more fields are invalid", errors)))
    return parsed


def parse_beacons(body: bytes, *, max_batch: int) -> ParsedBody | Rejection:
    """Decode a request body holding one beacon object or a bounded array of them."""
    return parse_valid_body(body, max_batch=max_batch) or parse_item_by_item(body, max_batch=max_batch)
