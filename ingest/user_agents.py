"""Browser, OS, device class and bot flag from a user agent, by maintained lists, not guesses.

- **Browser, OS, device**: ua-parser, with uap-core's regexes (``ua-parser-builtins``).
- **Bots**: either of two maintained lists, crawlerdetect (a port of JayBizzle's Crawler-Detect
  list, which knows that a CUBOT phone is not a bot) and isbot's patterns (vendored in
  ``ingest/data/``, which knows synthetic monitors, automation and AI crawlers that crawlerdetect
  does not: Playwright, Catchpoint, SpeedCurve's ``PTST``, ``meta-externalagent``), ua-parser's
  ``Spider`` device, an empty user agent, and the headless browsers Tally has always counted as
  automation.
- **Tablets**: what uap-core says: the iPad and Kindle families, its ``Generic Tablet`` (model
  ``Tablet``) and its ``Generic_Android_Tablet`` brand. That last one is Google's convention
  for Android user agents (a phone's says ``Mobile``, a tablet's does not), which uap-core
  applies only to the devices it does not name; Tally applies it to named ones too, so a
  ``Lenovo TB-J606F`` or a ``Nexus 7`` is a tablet as well. An iPad in desktop mode says it is
  a Mac and counts as a desktop: nothing in its user agent tells them apart.

Everything here runs once per distinct user agent (:func:`parse_agent` is cached).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import regex
from crawlerdetect import CrawlerDetect
from ua_parser import Device
from ua_parser import parse as parse_user_agent

MAX_USER_AGENT = 1000  # characters ua-parser reads: bounds the regex work a hostile header can cost
# Characters the crawler lists are matched against: crawlers name themselves early, and
# crawlerdetect's ~1,500 patterns cost ~0.5 ms on a browser's user agent but ~20 ms on 1,000
# characters of junk; isbot's 209, one regex, ~0.5 ms and ~1-2 ms.
MAX_CRAWLER_CHECK = 256
HEADLESS_MARKERS = ("headless", "lighthouse", "phantomjs")  # automation that looks like a browser
TABLET_FAMILIES = ("iPad", "Kindle")  # uap-core's device families of tablets
MOBILE_OS = ("Android", "iOS")

ISBOT_PATTERNS_FILE = Path(__file__).with_name("data") / "isbot-patterns.json"
# crawlerdetect patterns that match real browsers, ones that run a page's JavaScript (isbot's
# fixtures list these user agents under "Misidentified Browsers"): taken out of the user agent
# before crawlerdetect reads it, as crawlerdetect's own exclusions are. isbot still reads it whole.
BROWSERS_NOT_CRAWLERS = re.compile(r"^LibWWW/5\.0 (?=\(Linux; Android)| YLT(?= Chrome/)|TSM-turingos", re.IGNORECASE)


def load_isbot(path: Path = ISBOT_PATTERNS_FILE) -> regex.Pattern[str]:
    """Read the vendored ``patterns.json`` of isbot (described in ``ingest/data/README.md``) and
    compile it as isbot does: its patterns joined with ``|``, case-insensitive.

    The patterns are JavaScript's regular expressions; the ``regex`` package reads them as they
    are (the standard library's ``re`` refuses two: a look-behind whose alternatives differ in
    length, and a ``-`` beside ``\\d`` in a character class). ``ASCII``: ``\\w``, ``\\d`` and
    ``\\b`` then mean what they mean in JavaScript.
    """
    patterns = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(patterns, list) and all(isinstance(p, str) for p in patterns), f"{path}: a list of strings"
    return regex.compile("|".join(patterns), regex.IGNORECASE | regex.ASCII)


ISBOT = load_isbot()  # ~209 patterns, compiled once at import
CRAWLERS = CrawlerDetect()
CRAWLERS.is_crawler("Tally")  # compiles its patterns now (~30 ms), not during the first request


@dataclass(frozen=True)
class Agent:
    browser: str
    os: str
    device: str  # "desktop", "mobile" or "tablet"
    is_bot: bool


def device_class(user_agent: str, device: Device | None, os_family: str) -> str:
    """The device class: "tablet", "mobile" or "desktop", from ua-parser's device (family, brand, model) and OS."""
    if device is not None and (
        device.family.startswith(TABLET_FAMILIES)
        or device.brand == "Generic_Android_Tablet"
        or device.model == "Tablet"
    ):
        return "tablet"
    if os_family == "Android" and "Mobile" not in user_agent:
        return "tablet"
    if os_family in MOBILE_OS or "mobi" in user_agent.lower():
        return "mobile"
    return "desktop"


def is_bot(user_agent: str, device: Device | None) -> bool:
    """A crawler, a monitor, automation or an empty user agent: kept in raw, left out of the reports.

    Either list naming it is enough; both read the first :data:`MAX_CRAWLER_CHECK` characters.
    """
    if not user_agent or (device is not None and device.family == "Spider"):
        return True
    head, lowered = user_agent[:MAX_CRAWLER_CHECK], user_agent.lower()
    return (
        any(marker in lowered for marker in HEADLESS_MARKERS)
        or ISBOT.search(head) is not None
        or CRAWLERS.is_crawler(BROWSERS_NOT_CRAWLERS.sub("", head))
    )


@lru_cache(maxsize=8192)
def parse_agent(user_agent: str) -> Agent:
    """Browser, OS, device class and bot flag from a user agent (cached: few distinct UAs)."""
    head = user_agent[:MAX_USER_AGENT]
    parsed = parse_user_agent(head)
    browser = parsed.user_agent.family if parsed.user_agent else "Other"
    os_family = parsed.os.family if parsed.os else "Other"
    return Agent(browser, os_family, device_class(head, parsed.device, os_family), is_bot(head, parsed.device))
