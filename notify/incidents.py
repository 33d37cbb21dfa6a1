"""One incident, one alert: the quiet period of each (site, rule), as a pure state machine.

A rule that starts firing sends an alert, unless the same site and rule sent one less than
``quiet`` ago (a flapping condition); while it keeps firing nothing more is sent, except that an
incident first held back is announced once the quiet period has passed. When it clears, a
recovery message follows an announced incident.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from typing import Literal

Action = Literal["alert", "recovery"]


@dataclass(frozen=True)
class Incident:
    """The state of one (site, rule) between checks."""

    firing: bool = False
    since: dt.datetime | None = None  # when the current incident began
    announced: bool = False  # an alert was sent for the current incident
    last_alert: dt.datetime | None = None
    summary: str = ""


def step(
    state: Incident, firing: bool, now: dt.datetime, quiet: dt.timedelta, summary: str = ""
) -> tuple[Incident, Action | None]:
    """The next state of an incident given this check's verdict, and what to send (if anything)."""
    quiet_over = state.last_alert is None or now - state.last_alert >= quiet
    if firing and not state.firing:
        if quiet_over:
            return Incident(True, now, True, now, summary), "alert"
        return Incident(True, now, False, state.last_alert, summary), None
    if firing:
        if not state.announced and quiet_over:
            return replace(state, announced=True, last_alert=now, summary=summary), "alert"
        return state, None
    if state.firing:
        return Incident(False, None, False, state.last_alert, state.summary), "recovery" if state.announced else None
    return state, None
