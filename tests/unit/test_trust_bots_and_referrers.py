"""Bots, devices and referrers come from maintained lists: real user agents and referrers, classified.

The lists: crawlerdetect and ua-parser (uap-core) for user agents; for referrers Matomo's
search-engine, social and AI-assistant lists (``ingest/data/SearchEngines.yml``, ``Socials.yml``,
``AIAssistants.yml``) and Tally's own (``ingest/data/tally-referrers.yml``: webmail, ad clicks),
described in ``ingest/data/README.md``.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ingest.enrich import classify_referrer, parse_agent
from ingest.referrers import (
    AI_ASSISTANTS_FILE,
    LISTS,
    MATOMO_FILES,
    SEARCH_ENGINES_FILE,
    SOCIALS_FILE,
    TALLY_REFERRERS_FILE,
    Entry,
    KnownReferrer,
    build_database,
    host_forms,
    known_referrer,
    load_database,
    read_yaml,
    tally_entries,
)

CUBOT_NOTE_20 = (
    "Mozilla/5.0 (Linux; Android 11; CUBOT NOTE 20 PRO) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/110.0.0.0 Mobile Safari/537.36"
)
GALAXY_TAB_S7 = (
    "Mozilla/5.0 (Linux; Android 13; SM-T870) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 Safari/537.36"
)
GOOGLEBOT = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
BINGBOT = "Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)"

# (name, user agent, device, is_bot): a phone, a tablet, a desktop or a bot, as browsers and crawlers send them.
USER_AGENTS = [
    # Phones whose make or model contains "bot": people, not crawlers.
    ("CUBOT Note 20 Pro", CUBOT_NOTE_20, "mobile", False),
    (
        "CUBOT X30 (WebView)",
        "Mozilla/5.0 (Linux; Android 10; CUBOT_X30 Build/QP1A.190711.020; wv) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Version/4.0 Chrome/83.0.4103.106 Mobile Safari/537.36",
        "mobile",
        False,
    ),
    (
        "CUBOT KingKong 3",
        "Mozilla/5.0 (Linux; Android 9; CUBOT KINGKONG 3 Build/PPR1.180610.011) AppleWebKit/537.36 "
        "(KHTML, like Gecko) Chrome/96.0.4664.104 Mobile Safari/537.36",
        "mobile",
        False,
    ),
    # Android tablets: their user agents leave out "Mobile".
    ("Galaxy Tab S7", GALAXY_TAB_S7, "tablet", False),
    (
        "Galaxy Tab S9, Samsung Internet",
        "Mozilla/5.0 (Linux; Android 14; SM-X710) AppleWebKit/537.36 (KHTML, like Gecko) SamsungBrowser/24.0 "
        "Chrome/117.0.0.0 Safari/537.36",
        "tablet",
        False,
    ),
    (
        "Lenovo Tab M10",
        "Mozilla/5.0 (Linux; Android 12; Lenovo TB-J606F) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/119.0.0.0 Safari/537.36",
        "tablet",
        False,
    ),
    (
        "Nexus 7",
        "Mozilla/5.0 (Linux; Android 4.4.2; Nexus 7 Build/KOT49H) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/34.0.1847.114 Safari/537.36",
        "tablet",
        False,
    ),
    (
        "Kindle Fire, Silk",
        "Mozilla/5.0 (Linux; Android 9; KFMAWI) AppleWebKit/537.36 (KHTML, like Gecko) Silk/118.3.1 "
        "like Chrome/118.0.5993.111 Safari/537.36",
        "tablet",
        False,
    ),
    (
        "Firefox on an Android tablet",
        "Mozilla/5.0 (Android 13; Tablet; rv:121.0) Gecko/121.0 Firefox/121.0",
        "tablet",
        False,
    ),
    (
        "iPad",
        "Mozilla/5.0 (iPad; CPU OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 "
        "Mobile/15E148 Safari/604.1",
        "tablet",
        False,
    ),
    # Phones.
    (
        "Pixel 8",
        "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 "
        "Mobile Safari/537.36",
        "mobile",
        False,
    ),
    (
        "Chrome's reduced Android user agent",
        "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0.0.0 "
        "Mobile Safari/537.36",
        "mobile",
        False,
    ),
    (
        "Firefox on an Android phone",
        "Mozilla/5.0 (Android 13; Mobile; rv:121.0) Gecko/121.0 Firefox/121.0",
        "mobile",
        False,
    ),
    (
        "iPhone",
        "Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
        "Version/18.1 Mobile/15E148 Safari/604.1",
        "mobile",
        False,
    ),
    # Desktops.
    (
        "Edge on Windows",
        "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 "
        "Safari/537.36 Edg/131.0.0.0",
        "desktop",
        False,
    ),
    ("Firefox on Linux", "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0", "desktop", False),
    # Crawlers and automation.
    ("Googlebot", GOOGLEBOT, "desktop", True),
    (
        "Googlebot Smartphone",
        "Mozilla/5.0 (Linux; Android 6.0.1; Nexus 5X Build/MMB29P) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/120.0.6099.71 Mobile Safari/537.36 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
        "mobile",
        True,
    ),
    ("bingbot", BINGBOT, "desktop", True),
    (
        "bingbot as Chrome",
        "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm) "
        "Chrome/116.0.1938.76 Safari/537.36",
        "desktop",
        True,
    ),
    (
        "GPTBot",
        "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; GPTBot/1.2; +https://openai.com/gptbot)",
        "desktop",
        True,
    ),
    ("UptimeRobot", "Mozilla/5.0+(compatible; UptimeRobot/2.0; http://www.uptimerobot.com/)", "desktop", True),
    (
        "facebookexternalhit",
        "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)",
        "desktop",
        True,
    ),
    (
        "HeadlessChrome",
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/120.0.0.0 Safari/537.36",
        "desktop",
        True,
    ),
    (
        "Lighthouse",
        "Mozilla/5.0 (Linux; Android 11; moto g power (2022)) AppleWebKit/537.36 (KHTML, like Gecko) "
        "Chrome/119.0.0.0 Mobile Safari/537.36 Chrome-Lighthouse",
        "mobile",
        True,
    ),
    ("curl", "curl/8.4.0", "desktop", True),
    ("python-requests", "python-requests/2.31.0", "desktop", True),
    ("no user agent", "", "desktop", True),
]


@pytest.mark.parametrize(("name", "user_agent", "device", "is_bot"), USER_AGENTS, ids=[u[0] for u in USER_AGENTS])
def test_real_user_agents_get_their_device_class_and_bot_flag(
    name: str, user_agent: str, device: str, is_bot: bool
) -> None:
    agent = parse_agent(user_agent)
    assert (agent.device, agent.is_bot) == (device, is_bot), name


def test_a_cubot_phone_is_a_person_an_android_tablet_a_tablet_and_the_search_crawlers_bots() -> None:
    """The three mistakes of the hand-written rules, and the two crawlers they did get right."""
    assert parse_agent(CUBOT_NOTE_20).is_bot is False
    assert parse_agent(GALAXY_TAB_S7).device == "tablet"
    assert parse_agent(GOOGLEBOT).is_bot and parse_agent(BINGBOT).is_bot


# (referrer, source, medium, channel) for a page of a.com with no utm_* parameters.
REFERRERS = [
    ("https://mail.google.com/", "Gmail", "email", "Email"),
    ("https://mail.google.com/mail/u/0/", "Gmail", "email", "Email"),
    ("android-app://com.google.android.gm/", "Gmail", "email", "Email"),
    ("https://outlook.live.com/", "Outlook.com", "email", "Email"),
    ("https://mail.yahoo.com/d/folders/1", "Yahoo! Mail", "email", "Email"),
    ("https://www.google.com/", "Google", "organic", "Organic Search"),
    ("https://www.google.co.uk/", "Google", "organic", "Organic Search"),
    ("https://news.google.com/", "Google News", "organic", "Organic Search"),
    ("https://www.bing.com/search?q=tally", "Bing", "organic", "Organic Search"),
    ("https://duckduckgo.com/", "DuckDuckGo", "organic", "Organic Search"),
    ("https://www.qwant.com/", "Qwant", "organic", "Organic Search"),  # listed with www. only
    ("https://t.co/abc", "Twitter", "social", "Social"),
    ("https://www.reddit.com/r/analytics/", "reddit", "social", "Social"),  # Matomo's spelling
    ("https://news.ycombinator.com/", "Hacker News", "social", "Social"),
    ("https://l.facebook.com/", "Facebook", "social", "Social"),
    ("https://www.googleadservices.com/", "Google", "paid", "Paid"),
    ("https://chatgpt.com/", "ChatGPT", "referral", "Referral"),
    ("https://support.google.com/answer/1", "Google", "referral", "Referral"),  # Google, but not its search
    ("https://blog.example.org/post", "blog.example.org", "referral", "Referral"),
    ("https://www.a.com/pricing", None, None, "Direct"),  # internal navigation
    (None, None, None, "Direct"),
]


@pytest.mark.parametrize(("referrer", "source", "medium", "channel"), REFERRERS, ids=[str(r[0]) for r in REFERRERS])
def test_real_referrers_get_their_source_medium_and_channel(
    referrer: str | None, source: str | None, medium: str | None, channel: str
) -> None:
    acquisition = classify_referrer(referrer, "a.com", {})
    assert (acquisition.source, acquisition.medium, acquisition.channel) == (source, medium, channel)


def test_webmail_is_email_not_organic_search() -> None:
    assert classify_referrer("https://mail.google.com/", "a.com", {}).channel == "Email"


def test_utm_parameters_and_click_ids_still_come_before_the_referrer() -> None:
    newsletter = classify_referrer("https://www.google.com/", "a.com", {"utm_source": "news", "utm_medium": "email"})
    assert (newsletter.source, newsletter.channel) == ("news", "Email")
    assert classify_referrer("https://mail.google.com/", "a.com", {"gclid": "x"}).channel == "Paid"


def test_a_path_entry_of_the_database_is_matched_on_the_host_and_first_path_segment() -> None:
    webmail, images = known_referrer("orange.fr", "/webmail/fr_FR/read.html"), known_referrer("google.com", "/imgres")
    assert webmail is not None and (webmail.source, webmail.medium) == ("Orange Webmail", "email")
    assert images is not None and (images.source, images.medium) == ("Google Images", "search")
    assert known_referrer("orange.fr", "/") is None and known_referrer("example.invalid", "/") is None


def found(host: str, path: str = "/") -> tuple[str, str] | None:
    known = known_referrer(host, path)
    return (known.source, known.medium) if known else None


@pytest.mark.parametrize(
    ("host", "path", "expected"),
    [
        ("www.google.de", "/", ("Google", "search")),  # google.{}
        ("www.google.com.br", "/", ("Google", "search")),  # {} after com
        ("www.google.co.jp", "/imgres", ("Google Images", "search")),  # google.{}/imgres
        ("images.google.fr", "/", ("Google Images", "search")),  # images.google.{}
        ("uk.search.yahoo.com", "/", ("Yahoo!", "search")),  # {}.search.yahoo.com
        ("cn.bing.com", "/images/search", ("Bing Images", "search")),  # {}.bing.com/images/search
        ("google.example", "/", None),  # {} is a country code, not any TLD
    ],
)
def test_matomos_placeholder_stands_for_a_country_code_as_the_tld_or_a_label(
    host: str, path: str, expected: tuple[str, str] | None
) -> None:
    assert found(host, path) == expected


def test_a_host_takes_the_first_list_that_names_it_or_a_domain_above_it() -> None:
    """Tally's list, then Matomo's assistants, social networks, search engines."""
    assert found("www.facebook.com") == ("Facebook", "social")  # a search engine too, in Matomo's list
    assert found("www.perplexity.ai") == ("Perplexity", "chatbot")
    assert found("x.com", "/i/grok") == ("Grok", "chatbot") and found("x.com", "/home") == ("Twitter", "social")
    assert found("www.cnn.com") == ("CNN", "unknown")  # Google's, in Matomo's search list
    assert found("docs.google.com") == ("Google", "unknown") and found("mail.yandex.ru") == ("Yandex Mail", "email")
    social, search = KnownReferrer("Example", "social"), KnownReferrer("Example Search", "search")
    database = build_database([[("example.org", social)], [("www.example.org", search), ("example.net", search)]])
    assert database.lookup("www.example.org") == social and database.lookup("example.net") == search


def test_a_host_is_tried_as_it_is_then_with_the_placeholder() -> None:
    assert host_forms("www.google.co.uk") == ["www.google.co.uk", "www.google.{}", "www.google.co.{}"]
    assert host_forms("images.uk.ask.com") == ["images.uk.ask.com", "images.{}.ask.com"]
    assert host_forms("blog.example.org") == ["blog.example.org"] and host_forms("localhost") == ["localhost"]


@pytest.mark.parametrize("path", MATOMO_FILES, ids=[p.name for p in MATOMO_FILES])
def test_each_vendored_list_is_the_file_its_readme_describes(path: Path) -> None:
    """An update of a file must update ingest/data/README.md (version, digest) too."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest in (path.parent / "README.md").read_text(), f"update ingest/data/README.md for the new {path.name}"


@pytest.mark.parametrize(("path", "entries_of"), LISTS, ids=[p.name for p, _ in LISTS])
def test_each_list_parses_and_names_each_host_once(path: Path, entries_of: Callable[[Any], Iterator[Entry]]) -> None:
    entries = list(entries_of(read_yaml(path)))
    hosts = [url.lower() for url, _ in entries]
    assert len(hosts) == len(set(hosts)), sorted({h for h in hosts if hosts.count(h) > 1})
    assert all(url == url.strip() and " " not in url for url in hosts)
    minimum = {SEARCH_ENGINES_FILE: 600, SOCIALS_FILE: 200, AI_ASSISTANTS_FILE: 20, TALLY_REFERRERS_FILE: 30}
    assert len(hosts) >= minimum[path]


def test_tallys_list_adds_hosts_matomos_lists_lack_and_renames_none() -> None:
    document = read_yaml(TALLY_REFERRERS_FILE)
    assert set(document) == {"email", "paid", "unknown"}  # Matomo's lists give search, social and chatbot
    ours = {url.lower() for url, _ in tally_entries(document)}
    matomo = {url.lower() for path, entries_of in LISTS[1:] for url, _ in entries_of(read_yaml(path))}
    assert not ours & matomo
    assert TALLY_REFERRERS_FILE.read_text(encoding="utf-8").startswith("# Tally's own referrer list")


def test_a_list_of_an_unknown_medium_is_refused() -> None:
    with pytest.raises(ValueError, match="media"):
        list(tally_entries({"newsletters": {"X": ["x.example"]}}))


def test_a_broken_list_stops_ingest_at_import_naming_the_file(tmp_path: Path) -> None:
    for path, _ in LISTS:
        shutil.copy(path, tmp_path / path.name)
    (tmp_path / SOCIALS_FILE.name).write_text("Facebook: facebook.com\n", encoding="utf-8")  # a name, no list
    with pytest.raises(RuntimeError, match=r"Socials\.yml.*'Facebook' should list its URLs"):
        load_database(tmp_path)
