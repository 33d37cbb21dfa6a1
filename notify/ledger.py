"""The delivery ledger: what was sent to whom, and each alert rule's incident state.

One JSON file, ``<home>/notify/ledger.json``, 0600, replaced atomically after every delivery
(:mod:`tally.private_files`), so a restart, even mid-run, never sends a delivered message again.
A run holds the folder's lock from reading to its last write, so two runs never interleave.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from notify.channels import Channel, DeliveryError
from notify.incidents import Incident
from notify.messages import Message
from tally.log import kv
from tally.private_files import folder_lock, write_private

log = logging.getLogger("tally.notify")

KEEP = dt.timedelta(days=400)  # delivery records older than this are dropped (a monthly report's key lives a year)
Sleep = Callable[[float], object]


@dataclass(frozen=True)
class Delivery:
    """The outcome of one message to one recipient."""

    key: str
    recipient: str
    status: str  # sent | failed
    attempts: int
    at: str  # ISO time of the last attempt
    error: str = ""


def _time(text: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(text) if text else None


class Ledger:
    """The ledger of one Tally home; use :func:`open_ledger` to hold its lock."""

    def __init__(self, path: Path) -> None:
        self.path = path
        data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
        self._deliveries: dict[str, dict[str, dict[str, Any]]] = data.get("deliveries", {})
        self._incidents: dict[str, dict[str, Any]] = data.get("incidents", {})
        # Messages decided but not yet delivered to everyone: a run that dies sends them next time.
        self._pending: list[dict[str, Any]] = data.get("pending", [])

    def sent(self, key: str, recipient: str) -> bool:
        """True once ``key`` was delivered to ``recipient``."""
        return self._deliveries.get(key, {}).get(recipient, {}).get("status") == "sent"

    def record(self, delivery: Delivery) -> None:
        """Keep one outcome, written to disk before this returns."""
        entry = {k: v for k, v in asdict(delivery).items() if k not in ("key", "recipient")}
        self._deliveries.setdefault(delivery.key, {})[delivery.recipient] = entry
        self.save()

    def deliveries(self) -> list[Delivery]:
        """Every recorded outcome, oldest first."""
        found = [Delivery(key, who, **entry) for key, by in self._deliveries.items() for who, entry in by.items()]
        return sorted(found, key=lambda d: d.at)

    def add_pending(self, message: Message) -> None:
        """Remember a message to deliver (written with the next :meth:`save`)."""
        if all(p["key"] != message.key for p in self._pending):
            self._pending.append(message.as_record())

    def pending(self) -> list[Message]:
        """Messages decided but not yet delivered, oldest first."""
        return [Message.of_record(p) for p in self._pending]

    def done(self, key: str) -> None:
        """The message ``key`` was tried on every channel; it is no longer pending."""
        self._pending = [p for p in self._pending if p["key"] != key]
        self.save()

    def incident(self, site: str, rule: str) -> Incident:
        stored = self._incidents.get(f"{site}|{rule}")
        if stored is None:
            return Incident()
        return Incident(
            firing=stored["firing"],
            since=_time(stored["since"]),
            announced=stored["announced"],
            last_alert=_time(stored["last_alert"]),
            summary=stored.get("summary", ""),
        )

    def set_incident(self, site: str, rule: str, state: Incident) -> None:
        """Keep the state of one (site, rule); written with the next :meth:`save`."""
        self._incidents[f"{site}|{rule}"] = {
            "firing": state.firing,
            "since": state.since.isoformat() if state.since else None,
            "announced": state.announced,
            "last_alert": state.last_alert.isoformat() if state.last_alert else None,
            "summary": state.summary,
        }

    def incidents(self) -> dict[tuple[str, str], Incident]:
        """Every (site, rule) with a state."""
        return {tuple(k.split("|", 1)): self.incident(*k.split("|", 1)) for k in self._incidents}  # type: ignore[misc]

    def save(self) -> None:
        """Write the whole ledger atomically (0600), dropping delivery records :data:`KEEP` older than the newest."""
        newest = max((e["at"] for by in self._deliveries.values() for e in by.values()), default=None)
        cutoff = (dt.datetime.fromisoformat(newest) - KEEP).isoformat() if newest else ""
        self._deliveries = {
            key: by for key, by in self._deliveries.items() if max(e["at"] for e in by.values()) >= cutoff
        }
        text = json.dumps(
            {"version": 1, "deliveries": self._deliveries, "incidents": self._incidents, "pending": self._pending},
            indent=1,
        )
        write_private(self.path, text + "\n")


@contextmanager
def open_ledger(home: Path) -> Iterator[Ledger]:
    """The ledger under ``home``, locked against other runs until the block ends."""
    folder = home / "notify"
    with folder_lock(folder):
        yield Ledger(folder / "ledger.json")


def deliver(
    ledger: Ledger,
    message: Message,
    targets: Sequence[Channel],
    *,
    attempts: int,
    retry_seconds: float,
    clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    sleep: Sleep = time.sleep,
) -> list[Delivery]:
    """Send ``message`` to every target that does not have it yet: up to ``attempts`` tries each,
    waiting ``retry_seconds`` then twice as long each time; the outcome is recorded either way."""
    outcomes = []
    for target in targets:
        if ledger.sent(message.key, target.recipient):
            log.info("already sent", extra=kv(key=message.key, recipient=target.recipient))
            continue
        error = ""
        for attempt in range(1, attempts + 1):
            try:
                target.send(message)
            except DeliveryError as e:
                error = str(e)
                log.warning(
                    "delivery failed",
                    extra=kv(key=message.key, recipient=target.recipient, attempt=attempt, error=error),
                )
                if attempt < attempts:
                    sleep(retry_seconds * 2 ** (attempt - 1))
                continue
            outcome = Delivery(message.key, target.recipient, "sent", attempt, clock().isoformat())
            log.info("sent", extra=kv(key=message.key, recipient=target.recipient, attempts=attempt))
            break
        else:
            outcome = Delivery(message.key, target.recipient, "failed", attempts, clock().isoformat(), error)
            log.error(
                "delivery gave up",
                extra=kv(key=message.key, recipient=target.recipient, attempts=attempts, error=error),
            )
        ledger.record(outcome)
        outcomes.append(outcome)
    return outcomes
