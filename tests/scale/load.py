"""Steady beacons to ingest over HTTP from a background thread, each retried with the same event id
until ingest accepts it (202), as a browser's retry would. Bounded in count and time."""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field

import httpx

USER_AGENT = "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"


@dataclass
class Sent:
    accepted: dict[str, float] = field(default_factory=dict)  # event_id -> time.time() of its 202
    retries: int = 0  # failed attempts (connection errors, 5xx) that were sent again
    unaccepted: list[str] = field(default_factory=list)  # still not accepted when the load stopped


class SteadyBeacons:
    """``with SteadyBeacons(url, site, rate=20) as load: …``; then ``load.sent``."""

    def __init__(self, ingest_url: str, site: str, *, rate: float, max_events: int = 20_000) -> None:
        self.url = ingest_url + "/api/event"
        self.site = site
        self.interval = 1.0 / rate
        self.max_events = max_events
        self.sent = Sent()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="beacons", daemon=True)

    def __enter__(self) -> SteadyBeacons:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> Sent:
        self._stop.set()
        self._thread.join(60)
        return self.sent

    def accepted_since(self, moment: float) -> int:
        return sum(1 for at in list(self.sent.accepted.values()) if at >= moment)

    def _send_until_accepted(self, client: httpx.Client, i: int) -> None:
        event_id = str(uuid.uuid4())
        now = int(time.time() * 1000)
        body = json.dumps(
            {"id": event_id, "s": self.site, "u": f"https://{self.site}/p/{i % 50}", "te": now, "ts": now}
        )
        # A visitor per 20 events: distinct clients, so no rate limit applies.
        headers = {
            "Content-Type": "text/plain",
            "User-Agent": USER_AGENT,
            "X-Forwarded-For": f"198.51.100.{i // 20 % 250}",
        }
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if client.post(self.url, content=body, headers=headers).status_code == 202:
                    self.sent.accepted[event_id] = time.time()
                    return
            except httpx.HTTPError:
                pass
            self.sent.retries += 1
            time.sleep(0.2)
        self.sent.unaccepted.append(event_id)

    def _run(self) -> None:
        with httpx.Client(timeout=10) as client:
            next_at = time.monotonic()
            for i in range(self.max_events):
                if self._stop.is_set():
                    return
                self._send_until_accepted(client, i)
                next_at += self.interval
                time.sleep(max(0.0, next_at - time.monotonic()))
