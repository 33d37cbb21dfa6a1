"""Steady generated load through ingest over HTTP, retried the way a browser or proxy retries.

One thread sends page views (and some custom events) at a fixed rate. A request that fails
(connection refused or reset, timeout, 5xx) is sent again with the same body, hence the same
``event_id``, until ingest answers; so an event whose first attempt was in fact stored can reach
Kafka twice, which the archiver and the views must deduplicate. A 202 is a promise: that event
must never be lost. Client addresses come from a small, known set of documentation IPs sent as
``X-Forwarded-For`` (ingest trusts it from loopback), so the leak scan can look for them. Some
page URLs and referrers carry planted secrets (``tests.faults.payloads.PLANTED``: an e-mail
address and a token, in the query, the fragment and ``user:password@``) that ingest must not keep,
so the leak scan looks for those too; so do Plausible bodies naming another configured site and an
unknown domain (``d: "<site>,unknown.example"``: one event stored, the unknown domain's refusal a
dead letter), which carry no event id and are sent to the second site so the reconciliation of the
audited one is not touched.

Every ``resend_every``-th accepted event is sent once more, as a browser does when the answer to
a request that was in fact stored got lost: each run has events that reach Kafka twice.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field

import httpx

from tests.faults.payloads import plausible_event_with_secrets, referrer_with_secrets, url_with_secrets

# TEST-NET-2 addresses (RFC 5737). Their packed bytes (C6 33 64 xx) hardly occur in text or
# in the small integers of binary formats, which keeps chance matches of the packed form rare.
CLIENT_IPS = ("198.51.100.23", "198.51.100.187", "198.51.100.214", "198.51.100.251")
USER_AGENTS = tuple(f"Mozilla/5.0 (X11; Linux x86_64; rv:{v}.0) Gecko/20100101 Firefox/{v}.0" for v in range(90, 140))
RETRY_FOR_S = 180.0


@dataclass
class LoadReport:
    """What the load generator did: every event ingest accepted, and what went wrong on the way."""

    accepted: dict[str, str] = field(default_factory=dict)  # event_id -> type, for every 202
    failed_attempts: int = 0  # requests that failed and were sent again
    resent: int = 0  # accepted events sent once more on purpose
    refused: list[tuple[int, str]] = field(default_factory=list)  # 4xx answers (none expected)
    plausible_accepted: int = 0  # Plausible bodies answered 202 (ingest gives their events ids of its own)
    given_up: list[str] = field(default_factory=list)  # event_ids never accepted within RETRY_FOR_S
    client_ips: set[str] = field(default_factory=set)

    @property
    def pageviews(self) -> set[str]:
        return {event_id for event_id, kind in self.accepted.items() if kind == "pageview"}


class SteadyLoad:
    """Sends ``rate`` events/s to ingest from a background thread until :meth:`stop`."""

    def __init__(
        self, ingest_url: str, site: str, *, rate: float = 40.0, resend_every: int = 50, other_site: str = ""
    ) -> None:
        self.url = ingest_url + "/api/event"
        self.site = site
        self.other_site = other_site  # when set, some bodies are Plausible's, naming it and an unknown domain
        self.rate = rate
        self.resend_every = resend_every
        self.report = LoadReport()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="steady-load", daemon=True)

    def __enter__(self) -> SteadyLoad:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def accepted_so_far(self) -> int:
        with self._lock:
            return len(self.report.accepted)

    def stop(self) -> LoadReport:
        """Stop sending (after the request in flight, with its retries) and return the report."""
        self._stop.set()
        self._thread.join(RETRY_FOR_S + 30)
        assert not self._thread.is_alive(), "the load thread did not stop"
        return self.report

    def _event(self, i: int) -> tuple[dict[str, object], dict[str, str]]:
        now = int(time.time() * 1000)
        body: dict[str, object] = {
            "id": str(uuid.uuid4()),
            "s": self.site,
            "u": f"https://{self.site}/faults/p{i % 25}?utm_source=load",
            "ti": f"Fault page {i % 25}",
            "te": now,
            "ts": now,
            "w": 1280,
        }
        if i % 10 == 9:
            body.update(k="event", n="signup", p={"plan": "pro"})
        elif i % 7 == 0:
            body["r"] = "https://www.google.com/search?q=tally"
        elif i % 5 == 1:  # secrets in the URL and referrer, which must not be stored (payloads.PLANTED)
            body.update(u=url_with_secrets(self.site, f"/faults/p{i % 25}"), r=referrer_with_secrets())
        elif i % 5 == 3 and self.other_site:  # and in a Plausible body with a configured and an unknown domain
            body = plausible_event_with_secrets(self.other_site, f"/faults/p{i % 25}")
        ip = CLIENT_IPS[i % len(CLIENT_IPS)]
        headers = {
            "Content-Type": "text/plain",
            "User-Agent": USER_AGENTS[(i // len(CLIENT_IPS)) % len(USER_AGENTS)],
            "X-Forwarded-For": ip,
        }
        return body, headers

    def _send(self, client: httpx.Client, body: dict[str, object], headers: dict[str, str]) -> None:
        """Send one event until ingest answers it; record the answer (a Plausible body's apart: it has no id)."""
        content = json.dumps(body)
        event_id, kind = str(body.get("id", "")), str(body.get("k", "pageview"))
        deadline = time.monotonic() + RETRY_FOR_S
        while True:
            try:
                status = client.post(self.url, content=content, headers=headers).status_code
            except httpx.HTTPError:
                status = 0
            with self._lock:
                self.report.client_ips.add(headers["X-Forwarded-For"])
                if status == 202 and not event_id:
                    self.report.plausible_accepted += 1
                    return
                if status == 202:
                    self.report.accepted[event_id] = kind
                    return
                if 400 <= status < 500:
                    self.report.refused.append((status, event_id or "a Plausible body"))
                    return
                self.report.failed_attempts += 1
            if time.monotonic() > deadline:
                with self._lock:
                    self.report.given_up.append(event_id or "a Plausible body")
                return
            time.sleep(0.2)

    def _run(self) -> None:
        with httpx.Client(timeout=15.0) as client:
            start, i = time.monotonic(), 0
            while not self._stop.is_set():
                delay = start + i / self.rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                body, headers = self._event(i)
                self._send(client, body, headers)
                if self.resend_every and i % self.resend_every == self.resend_every - 1:
                    self._send(client, body, headers)  # the same event_id again
                    with self._lock:
                        self.report.resent += 1
                i += 1
