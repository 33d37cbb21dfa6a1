"""What a fuzz test of an endpoint keeps: each answer's status and every fault found.

A fault does not stop the run: it goes on to its last case, so that one run says how many cases
it sent and how many of them failed, and shows the shortest failing bodies.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from tests.faults.payloads import Request

SHORT, LONG = 200, 10_000
SIZES = [pytest.param(SHORT, id="short"), pytest.param(LONG, id="long", marks=pytest.mark.long)]


def fuzz(examples: int) -> settings:
    """Hypothesis settings for one endpoint: ``examples`` cases, no deadline (the machine is shared)."""
    return settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))


def stored_text_faults(value: bytes) -> list[str]:
    """Why a stored record could not be written on as text (Kafka, Delta, a dead letter's reader):
    not UTF-8, not JSON, or JSON whose strings UTF-8 cannot hold (a ``\\ud800`` escape)."""
    try:
        json.dumps(json.loads(value.decode("utf-8")), ensure_ascii=False).encode("utf-8")
    except (UnicodeError, ValueError, RecursionError) as e:
        return [f"record not storable as text ({type(e).__name__}: {e}): {value[:120]!r}"]
    return []


@dataclass
class Findings:
    """The cases sent, their statuses and the faults of each (a 5xx, a record that cannot be stored)."""

    cases: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    faults: list[tuple[bytes, str]] = field(default_factory=list)

    def note(self, request: Request, status: int, answer: Any, faults: list[str]) -> None:
        """One case: its status, and what was wrong with its answer and what it stored."""
        self.cases += 1
        self.statuses[status] += 1
        if status >= 500:
            faults = [f"status {status} {str(answer)[:200]}", *faults]
        self.faults += [(request.body, f"{fault} for {request!r}") for fault in faults]

    def summary(self) -> str:
        return f"{self.cases} cases, statuses {dict(sorted(self.statuses.items()))}, {len(self.faults)} faults"

    def assert_no_faults(self) -> None:
        """No fault in any case; else the shortest failing bodies, which are the easiest to read."""
        shortest = sorted(self.faults, key=lambda fault: len(fault[0]))[:5]
        assert not self.faults, f"{self.summary()}; the shortest:\n" + "\n".join(fault for _, fault in shortest)
