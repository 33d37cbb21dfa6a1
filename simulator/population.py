"""Synthetic visitors and their sessions: pages, referrers, user agents, custom events.

Pure and seeded, so a test can generate the same traffic twice.
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

PAGES = [
    "/",
    "/pricing",
    "/docs",
    "/docs/install",
    "/docs/api",
    "/blog",
    "/blog/streams-and-tables",
    "/blog/exactly-once",
    "/about",
    "/signup",
    "/contact",
    "/changelog",
]
PAGE_WEIGHTS = [30, 12, 14, 8, 6, 9, 6, 5, 3, 4, 2, 1]
REFERRERS = [
    None,
    "https://www.google.com/",
    "https://duckduckgo.com/",
    "https://news.ycombinator.com/",
    "https://t.co/abc",
    "https://www.reddit.com/r/analytics/",
    "https://github.com/tally/tally",
    "https://www.bing.com/search?q=tally",
]
REFERRER_WEIGHTS = [35, 25, 6, 8, 5, 6, 10, 5]
CAMPAIGNS = [
    None,
    "?utm_source=newsletter&utm_medium=email&utm_campaign=launch",
    "?utm_source=google&utm_medium=cpc&utm_campaign=brand",
]
CAMPAIGN_WEIGHTS = [90, 6, 4]
USER_AGENTS = [
    (
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/131.0.0.0 Safari/537.36",
        1920,
    ),
    (
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) "
        "Version/18.1 Safari/605.1.15",
        1440,
    ),
    ("Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0", 1680),
    (
        "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
        "Version/18.1 Mobile/15E148 Safari/604.1",
        390,
    ),
    (
        "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/131.0.0.0 Mobile Safari/537.36",
        412,
    ),
    (
        "Mozilla/5.0 (iPad; CPU OS 17_6 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
        "Version/17.6 Mobile/15E148 Safari/604.1",
        820,
    ),
    ("Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", 0),
]
UA_WEIGHTS = [34, 14, 8, 22, 14, 5, 3]
LANGUAGES = ["en-US", "en-GB", "de-DE", "fr-FR", "es-ES", "ja-JP"]


@dataclass
class Visitor:
    ip: str
    user_agent: str
    screen_w: int
    language: str


@dataclass
class Session:
    visitor: Visitor
    pages_left: int
    current: str | None = None
    entry_referrer: str | None = None
    started: float = field(default_factory=time.time)


@dataclass(frozen=True)
class Beacon:
    """One request to send: wire payload plus the headers a browser would carry."""

    payload: dict[str, Any]
    ip: str
    user_agent: str


class Population:
    """A fixed set of visitors whose sessions unfold one beacon at a time."""

    def __init__(self, *, site_id: str, host: str, visitors: int, seed: int = 7) -> None:
        self.rng = random.Random(seed)
        self.site_id, self.host = site_id, host
        self.visitors = [self._visitor() for _ in range(visitors)]
        self.sessions: list[Session] = []

    def _visitor(self) -> Visitor:
        rng = self.rng
        ua, width = rng.choices(USER_AGENTS, UA_WEIGHTS)[0]
        ip = f"198.{rng.randint(18, 19)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"  # RFC 2544 test range
        return Visitor(ip, ua, width, rng.choice(LANGUAGES))

    def _beacon(self, session: Session, kind: str, now_ms: int, **extra: Any) -> Beacon:
        v = session.visitor
        payload: dict[str, Any] = {
            "v": 1,
            "id": str(uuid.UUID(int=self.rng.getrandbits(128), version=4)),
            "k": kind,
            "s": self.site_id,
            "u": f"https://{self.host}{session.current}",
            "ti": f"Tally demo {session.current}",
            "te": now_ms,
            "ts": now_ms,
            "w": v.screen_w,
            "l": v.language,
            "z": "Europe/Berlin",
        }
        if session.entry_referrer:
            payload["r"] = session.entry_referrer
        payload.update(extra)
        return Beacon(payload, v.ip, v.user_agent)

    def next_beacons(self, now_ms: int) -> list[Beacon]:
        """The next thing some visitor does: start a visit, view a page, fire an event, or leave."""
        rng = self.rng
        if not self.sessions or rng.random() < 0.25:
            session = Session(rng.choice(self.visitors), pages_left=rng.choice([1, 1, 2, 3, 4, 6]))
            session.entry_referrer = rng.choices(REFERRERS, REFERRER_WEIGHTS)[0]
            campaign = rng.choices(CAMPAIGNS, CAMPAIGN_WEIGHTS)[0] or ""
            session.current = rng.choices(PAGES, PAGE_WEIGHTS)[0] + campaign
            self.sessions.append(session)
            return [self._beacon(session, "pageview", now_ms, ld=rng.randint(150, 3000))]
        session = rng.choice(self.sessions)
        roll = rng.random()
        if roll < 0.1 and session.current:
            plan = rng.choice(["free", "pro", "team"])
            return [self._beacon(session, "event", now_ms, n="signup", p={"plan": plan})]
        engagement = self._beacon(session, "engagement", now_ms, e=rng.randint(500, 180_000))
        session.pages_left -= 1
        if session.pages_left <= 0:
            self.sessions.remove(session)
            return [engagement]
        session.entry_referrer = f"https://{self.host}{session.current}"
        session.current = rng.choices(PAGES, PAGE_WEIGHTS)[0]
        return [engagement, self._beacon(session, "pageview", now_ms, ld=rng.randint(150, 3000))]
