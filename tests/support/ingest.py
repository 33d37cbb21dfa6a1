"""Ingest's app with its pipeline wired as the lifespan would, on the in-memory store (no Kafka)."""

from __future__ import annotations

import json
from typing import Any

from starlette.testclient import TestClient

from ingest.app import create_app
from ingest.pipeline import Pipeline
from tally.deadletter import DeadLetter
from tally.settings import Settings
from tests.support.stores import MemoryStore

FIREFOX = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"


class IngestApp:
    """``POST /api/event`` in-process: what a client is answered, what is stored, what is dead-lettered."""

    def __init__(self, settings: Settings, *, client_ip: str = "198.18.0.7") -> None:
        self.settings = settings
        app = create_app(settings)
        self.store = MemoryStore()
        app.state.pipeline = Pipeline(settings, self.store, app.state.limiter)
        self.client = TestClient(app, client=(client_ip, 4000), raise_server_exceptions=False)

    def post(self, body: Any, content_type: str = "text/plain") -> tuple[int, dict[str, Any]]:
        """Send ``body`` (bytes as they are, anything else as JSON); the status and the decoded answer."""
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers = {"Content-Type": content_type, "User-Agent": FIREFOX}
        response = self.client.post("/api/event", content=content, headers=headers)
        try:
            answer = response.json()
        except ValueError:
            answer = {"text": response.text}
        return response.status_code, answer

    def events(self) -> list[dict[str, Any]]:
        return self.store.events(self.settings.kafka.pageviews_topic)

    def letters(self) -> list[DeadLetter]:
        return self.store.letters(self.settings.kafka.rejected_topic)
