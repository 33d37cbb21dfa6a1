"""Synthetic monitors, automation and AI crawlers are bots; people's browsers are not.

Measured against isbot's own fixtures (``tests/unit/data/isbot/``, v5.2.1): its crawlers and its
browsers, classified by Tally's :func:`ingest.user_agents.parse_agent` (crawlerdetect, isbot's
patterns vendored in ``ingest/data/isbot-patterns.json``, ua-parser's ``Spider``, headless markers).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from ingest.user_agents import (
    ISBOT,
    ISBOT_PATTERNS_FILE,
    MAX_CRAWLER_CHECK,
    load_isbot,
    parse_agent,
)

FIXTURES = Path(__file__).with_name("data") / "isbot"
CRAWLER_GOAL = 0.98  # of isbot's crawler fixtures flagged as bots

# Browser fixtures that may stay bots: none of them runs the snippet on a page a person reads.
# t.js needs ES2020 (arrow functions, `?.`), which IE, Presto and the 1990s browsers cannot parse.
NEVER_RUN_THE_SNIPPET = {
    "AmigaVoyager/": "an Amiga browser, no ES2020",
    "Voyager3/": "an Amiga browser, no ES2020 (ua-parser's Spider)",
    "Lynx/": "a text browser, no JavaScript",
    "NCSA_Mosaic/": "a 1990s browser, no JavaScript",
    "MSIE ": "Internet Explorer, or Outlook's IE engine: t.js does not parse",
    "Presto/": "Opera 9, no ES2020",
    "Microsoft Office/": "Office fetching a link before it opens it",
    "Outlook-iOS/": "Outlook's link preview",
    "NetworkingExtension/": "Apple's background network requests (link previews)",
    "MozacFetch/": "Firefox for Android's background fetches (icons, previews)",
    "fuboTV/": "a TV app's video player",
    "Slack/": "Slack's desktop app (Electron, Chrome 78: t.js does not parse); links open in a browser",
    "Miniature.io/": "a screenshot service",
    "GTmetrix": "a page-speed monitor: a bot on purpose",
    "Yahoo! Slurp": "Yahoo's crawler",
}


def fixture(name: str) -> list[str]:
    """The user agents of one of isbot's fixture files (``name: [user agent, ...]``)."""
    document = yaml.safe_load((FIXTURES / name).read_text(encoding="utf-8"))
    return [user_agent for user_agents in document.values() for user_agent in user_agents]


CRAWLERS, BROWSERS = fixture("crawlers.yml"), fixture("browsers.yml")


def test_the_vendored_isbot_patterns_are_the_file_the_readme_describes() -> None:
    """An update of the file must update ingest/data/README.md (version, digest) too."""
    digest = hashlib.sha256(ISBOT_PATTERNS_FILE.read_bytes()).hexdigest()
    readme = (ISBOT_PATTERNS_FILE.parent / "README.md").read_text()
    assert digest in readme, "update ingest/data/README.md for the new isbot-patterns.json"


@pytest.mark.parametrize("name", ["crawlers.yml", "browsers.yml"])
def test_the_vendored_isbot_fixtures_are_the_files_their_readme_describes(name: str) -> None:
    digest = hashlib.sha256((FIXTURES / name).read_bytes()).hexdigest()
    assert digest in (FIXTURES / "README.md").read_text(), f"update tests/unit/data/isbot/README.md for {name}"


def test_isbots_patterns_in_python_flag_what_isbot_flags_in_javascript() -> None:
    """isbot's own tests: every crawler fixture matches its patterns, no browser fixture does."""
    assert [ua for ua in CRAWLERS if not ISBOT.search(ua[:MAX_CRAWLER_CHECK])] == []
    assert [ua for ua in BROWSERS if ISBOT.search(ua[:MAX_CRAWLER_CHECK])] == []


def test_at_least_98_percent_of_isbots_crawlers_are_bots() -> None:
    assert len(CRAWLERS) == 626 and len(BROWSERS) == 555  # v5.2.1's fixtures, read whole
    missed = [ua for ua in CRAWLERS if not parse_agent(ua).is_bot]
    assert 1 - len(missed) / len(CRAWLERS) >= CRAWLER_GOAL, missed


def test_no_browser_that_can_run_the_snippet_is_a_bot() -> None:
    """The browsers still flagged are link previews, apps and browsers too old to run t.js, each listed."""
    flagged = [ua for ua in BROWSERS if parse_agent(ua).is_bot]
    assert [ua for ua in flagged if not any(marker in ua for marker in NEVER_RUN_THE_SNIPPET)] == []
    unused = [marker for marker in NEVER_RUN_THE_SNIPPET if not any(marker in ua for ua in flagged)]
    assert unused == [], "no longer flagged: take them off NEVER_RUN_THE_SNIPPET"
    assert len(flagged) / len(BROWSERS) < 0.06


# (name, user agent): clients that run a page's JavaScript, and so the snippet, without a person.
MONITORS_AND_AUTOMATION = [
    (
        "Playwright",
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 "
        "Safari/537.36 Playwright/1.40.0",
    ),
    (
        "Splunk Synthetics",
        "Mozilla/5.0 (X11; Linux x86_64; Splunk Synthetics) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/127.0.6533.88 Safari/537.36",
    ),
    (
        "Catchpoint",
        "Mozilla/5.0 (X11; Linux x86_64; Catchpoint) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/75.0.3770.90 "
        "Safari/537.36",
    ),
    (
        "SpeedCurve (PTST)",
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/106.0.0.0 Safari/537.36 "
        "PTST/SpeedCurve/230120.120134",
    ),
    (
        "WebPageTest (PTST) on a phone",
        "Mozilla/5.0 (Linux; Android 6.0.1; Moto G (4) Build/MPJ24.139-64) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/65.0.3325.146 Mobile Safari/537.36 PTST/180829.190838",
    ),
    (
        "Splash",
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) splash Version/10.0 "
        "Chrome/98.0.4758.80 Safari/537.36",
    ),
    (
        "ArchiveBox",
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/90.0.4430.61 "
        "Safari/537.36 ArchiveBox/0.6.2",
    ),
    ("meta-externalagent", "Mozilla/5.0 (compatible; meta-externalagent/1.1)"),
    (
        "Cypress in its Electron browser",
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Cypress/13.6.0 "
        "Chrome/114.0.5735.289 Electron/25.8.4 Safari/537.36",
    ),
]


@pytest.mark.parametrize(("name", "user_agent"), MONITORS_AND_AUTOMATION, ids=[m[0] for m in MONITORS_AND_AUTOMATION])
def test_synthetic_monitors_automation_and_ai_crawlers_are_bots(name: str, user_agent: str) -> None:
    assert parse_agent(user_agent).is_bot, name


# (name, user agent): people's browsers, the three crawlerdetect mistakes for crawlers among them.
BROWSERS_OF_PEOPLE = [
    (
        "Chrome on Windows",
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 "
        "Safari/537.36",
    ),
    (
        "Safari on an iPhone",
        "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
        "Version/18.1 Mobile/15E148 Safari/604.1",
    ),
    (
        "Safari on a Mac",
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 "
        "Safari/605.1.15",
    ),
    ("Firefox on Windows", "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:133.0) Gecko/20100101 Firefox/133.0"),
    (
        "Chrome on Android",
        "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 "
        "Mobile Safari/537.36",
    ),
    (
        "Samsung Internet",
        "Mozilla/5.0 (Linux; Android 14; SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) SamsungBrowser/26.0 "
        "Chrome/122.0.0.0 Mobile Safari/537.36",
    ),
    (
        "Google app on an iPhone",
        "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
        "GSA/318.0.636488495 Mobile/15E148 Safari/604.1",
    ),
    (
        "Chrome with a LibWWW prefix",
        "LibWWW/5.0 (Linux; Android 7.0; Samsung Galaxy S8) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/123.0.0000.0 Mobile Safari/537.36",
    ),
    (
        "Chrome with YLT",
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_6) AppleWebKit/537.36 (KHTML, like Gecko) YLT "
        "Chrome/85.0.4183.121 Safari/537.36",
    ),
    (
        "Chrome with a TSM-turingos token",
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7; TSM-turingos-1253296984) AppleWebKit/537.36 "
        "(KHTML, like Gecko) Chrome/119.0.0.0 Safari/537.36",
    ),
]


@pytest.mark.parametrize(("name", "user_agent"), BROWSERS_OF_PEOPLE, ids=[b[0] for b in BROWSERS_OF_PEOPLE])
def test_common_browsers_of_people_are_not_bots(name: str, user_agent: str) -> None:
    assert not parse_agent(user_agent).is_bot, name


def test_isbot_s_javascript_patterns_are_read_as_javascript_reads_them(tmp_path: Path) -> None:
    """A look-behind whose alternatives differ in length, and a hyphen beside a class escape."""
    patterns = tmp_path / "patterns.json"
    patterns.write_text(json.dumps(["(?<! channel/|google/)google(?!(?:wv|app|/google| pixel))", r"^x[\w\d-.]+$"]))
    compiled = load_isbot(patterns)
    assert compiled.search("Google-Site-Verification/1.0") and not compiled.search("youtube channel/google")
    assert compiled.search("x-1.a") and not compiled.search("x-1 a")
