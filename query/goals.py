"""Goals and funnel steps: a page path (``page:/pricing``) or a custom event (``event:signup``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from query.spec import QueryError


@dataclass(frozen=True)
class Step:
    """A funnel step or goal: a page path or a custom event's name."""

    kind: Literal["page", "event"]
    value: str

    @classmethod
    def parse(cls, text: str) -> Step:
        """``page:/path`` or ``event:name``; anything else raises :class:`QueryError`."""
        kind, sep, value = text.partition(":")
        if not sep or kind not in ("page", "event") or not value:
            raise QueryError("step", "a step is 'page:/path' or 'event:name'")
        return cls("page" if kind == "page" else "event", value)

    def __str__(self) -> str:
        return f"{self.kind}:{self.value}"
