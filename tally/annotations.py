"""Annotations: a note on a site's day ("launched the pricing page"), shown on its time series.

Made with ``tally annotate``, on the dashboard or through the API, and read by all three. They
are the operator's words, not events, so they live beside the other small private state files
(``<home>/annotations/annotations.json``, 0600, replaced atomically under a folder lock) rather
than in the log: nothing derived from them needs replaying.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
import unicodedata
from dataclasses import asdict, dataclass
from pathlib import Path

from tally.private_files import folder_lock, write_private
from tally.settings import Settings

MAX_TEXT = 280  # a line under a chart, not a document
MAX_PER_SITE = 10_000  # a bound on the file, far above any real use


class AnnotationError(ValueError):
    """An annotation Tally refuses; the message says what to change."""


@dataclass(frozen=True)
class Annotation:
    """One note on one UTC day of one site."""

    annotation_id: str
    site_id: str
    day: dt.date
    text: str
    created: str  # ISO instant
    author: str  # who made it: an operator's login, a dashboard user, or an API key's id

    def to_json(self) -> dict[str, str]:
        return {**asdict(self), "day": self.day.isoformat()}


def folder(settings: Settings) -> Path:
    return settings.home_dir / "annotations"


def _path(settings: Settings) -> Path:
    return folder(settings) / "annotations.json"


def load_annotations(settings: Settings) -> list[Annotation]:
    """Every annotation, oldest day first (an empty list before the first)."""
    path = _path(settings)
    if not path.exists():
        return []
    records = json.loads(path.read_text())
    notes = [Annotation(**{**r, "day": dt.date.fromisoformat(r["day"])}) for r in records]
    return sorted(notes, key=lambda a: (a.day, a.created))


def annotations_for(settings: Settings, site_id: str, start: dt.date, end: dt.date) -> list[Annotation]:
    """The annotations of a site on the days ``start``..``end`` (inclusive)."""
    return [a for a in load_annotations(settings) if a.site_id == site_id and start <= a.day <= end]


def clean_text(text: str) -> str:
    """The note as stored: trimmed, control characters refused, at most ``MAX_TEXT`` characters."""
    text = text.strip()
    if not text:
        raise AnnotationError("an annotation needs some text")
    if len(text) > MAX_TEXT:
        raise AnnotationError(f"an annotation is at most {MAX_TEXT} characters (this one has {len(text)})")
    if any(unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp") for c in text):
        raise AnnotationError("an annotation may not contain control or invisible formatting characters")
    return text


def add_annotation(
    settings: Settings, *, site_id: str, day: dt.date, text: str, author: str, now: dt.datetime
) -> Annotation:
    """Store a new annotation; :class:`AnnotationError` for an unknown site or a bad text."""
    if settings.site(site_id) is None:
        raise AnnotationError(f"site {site_id!r} is not configured in Tally")
    if not dt.date(2000, 1, 1) <= day <= now.date() + dt.timedelta(days=366):
        raise AnnotationError(f"{day.isoformat()} is not a day an annotation can be on")
    note = Annotation(secrets.token_hex(6), site_id, day, clean_text(text), now.isoformat(), author)
    with folder_lock(folder(settings)):
        notes = load_annotations(settings)
        if sum(1 for a in notes if a.site_id == site_id) >= MAX_PER_SITE:
            raise AnnotationError(f"site {site_id!r} has {MAX_PER_SITE} annotations: delete some first")
        _save(settings, [*notes, note])
    return note


def delete_annotation(settings: Settings, annotation_id: str, *, site_ids: tuple[str, ...] | None = None) -> bool:
    """Delete one annotation (only of ``site_ids`` when given); False when there is no such one."""
    with folder_lock(folder(settings)):
        notes = load_annotations(settings)
        kept = [
            a for a in notes if not (a.annotation_id == annotation_id and (site_ids is None or a.site_id in site_ids))
        ]
        if len(kept) == len(notes):
            return False
        _save(settings, kept)
    return True


def _save(settings: Settings, notes: list[Annotation]) -> None:
    write_private(_path(settings), json.dumps([a.to_json() for a in notes], indent=1))
