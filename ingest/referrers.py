"""Known referrers from Matomo's search-engine, social and AI-assistant lists and Tally's own, read once.

The lists name the source behind a referrer host (``t.co`` is Twitter, ``mail.google.com`` Gmail)
and the kind of medium it is. Matomo's (``ingest/data/SearchEngines.yml``, ``Socials.yml``,
``AIAssistants.yml``: CC0, vendored unchanged) give ``search``, ``social`` and ``chatbot``;
Tally's own short list (``ingest/data/tally-referrers.yml``) gives ``email`` (webmail), ``paid``
and ``unknown`` (a known source of no particular medium, such as ``support.google.com``). The
files, their versions and licences are described in ``ingest/data/README.md``.

A host takes the entry of the first list that names it, or names a domain it is under: Tally's,
then the assistants, the social networks, the search engines (``www.facebook.com``, a search
engine to Matomo when the referrer carries a search term, which Tally does not read, is under
the social network ``facebook.com``).

Lookup: the host with its path, then the host with its first path segment, then the host alone;
then the same for each parent domain (``news.google.co.uk``, then ``google.co.uk``). At each
level the host is also tried with Matomo's ``{}``, a country code, in place of its TLD
(``google.{}`` is ``google.de`` and ``google.co.uk``) or of a two-letter label
(``{}.search.yahoo.com`` is ``uk.search.yahoo.com``). Pure: no network; a few dict probes per
domain level.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import yaml

DATA = Path(__file__).with_name("data")
TALLY_REFERRERS_FILE = DATA / "tally-referrers.yml"
SEARCH_ENGINES_FILE = DATA / "SearchEngines.yml"
SOCIALS_FILE = DATA / "Socials.yml"
AI_ASSISTANTS_FILE = DATA / "AIAssistants.yml"
MATOMO_FILES = (SEARCH_ENGINES_FILE, SOCIALS_FILE, AI_ASSISTANTS_FILE)
MEDIA = ("search", "email", "social", "paid", "chatbot", "unknown")
PLACEHOLDER = "{}"  # Matomo's: a country code, as a TLD or a label
# Matomo's second-level domains a country's TLD may follow: google.{} is also google.co.uk, google.com.br.
SECOND_LEVEL = frozenset({"com", "org", "net", "co", "it", "edu"})


@dataclass(frozen=True, slots=True)
class KnownReferrer:
    """A referrer the lists know: its source's name and the kind of medium it is."""

    source: str  # "Google", "Gmail", "reddit"
    medium: str  # one of MEDIA


Entry = tuple[str, KnownReferrer]  # a list's host, perhaps with {} and a path ("google.{}/imgres"), and its referrer


@dataclass(frozen=True)
class ReferrerDatabase:
    """Entries by host, and by host and path for the few entries that name a path.

    A host may hold Matomo's ``{}`` (``google.{}``); :func:`host_forms` gives the keys to probe.
    """

    by_host: Mapping[str, KnownReferrer]
    by_host_and_path: Mapping[str, Mapping[str, KnownReferrer]]  # host -> path ("/imgres") -> entry

    def lookup(self, host: str, path: str = "") -> KnownReferrer | None:
        """The entry for ``host`` (lower case) and ``path``, trying each parent domain in turn."""
        first_segment = "/" + path.split("/", 2)[1] if path.startswith("/") else ""
        while host:
            forms = host_forms(host)
            for form in forms:
                paths = self.by_host_and_path.get(form)
                if paths is not None:
                    found = paths.get(path) or paths.get(first_segment)
                    if found is not None:
                        return found
            for form in forms:
                found = self.by_host.get(form)
                if found is not None:
                    return found
            host = host.partition(".")[2]
        return None


def host_forms(host: str) -> list[str]:
    """``host``, then with ``{}`` for its country-code TLD, then for a two-letter label, then both.

    ``www.google.co.uk`` -> ``www.google.co.uk``, ``www.google.{}``, ``www.google.co.{}``;
    ``uk.search.yahoo.com`` -> itself and ``{}.search.yahoo.com``.
    """
    labels = host.split(".")
    if len(labels) < 2:
        return [host]
    tlds: list[list[str]] = []
    if len(labels[-1]) == 2:
        if len(labels) > 2 and labels[-2] in SECOND_LEVEL:
            tlds.append([*labels[:-2], PLACEHOLDER])
        tlds.append([*labels[:-1], PLACEHOLDER])
    # A two-letter label before the domain stands for a country too (uk.search.yahoo.com).
    country_labels = [i for i, label in enumerate(labels[:-2]) if len(label) == 2]
    forms = [labels, *tlds]
    for i in country_labels:
        forms += [[*form[:i], PLACEHOLDER, *form[i + 1 :]] for form in (labels, *tlds) if i < len(form) - 2]
    return [".".join(form) for form in forms]


def _named_urls(document: Any, list_name: str) -> Iterator[tuple[str, Any]]:
    if not isinstance(document, dict):
        raise ValueError(f"{list_name}: expected a mapping of names; got {type(document).__name__}")
    for name, value in document.items():
        if not isinstance(value, list) or not value:
            raise ValueError(f"{list_name}: {name!r} should list its URLs; got {value!r}")
        yield unquote(str(name)), value  # Matomo writes Google+ as Google%2B


def search_engine_entries(document: Any) -> Iterator[Entry]:
    """The hosts of Matomo's ``SearchEngines.yml`` (``name -> [{urls: [...], params: ...}]``).

    Only ``urls`` is read: ``params``, ``backlink``, ``hiddenkeyword`` and ``charsets`` are for
    search terms, which Tally does not keep.
    """
    for name, configurations in _named_urls(document, "SearchEngines.yml"):
        known = KnownReferrer(name, "search")
        for configuration in configurations:
            if not isinstance(configuration, dict) or not isinstance(configuration.get("urls"), list):
                raise ValueError(f"SearchEngines.yml: {name!r} has a configuration without urls: {configuration!r}")
            for url in configuration["urls"]:
                yield str(url), known


def named_entries(document: Any, medium: str, list_name: str) -> Iterator[Entry]:
    """The hosts of Matomo's ``Socials.yml`` or ``AIAssistants.yml`` (``name -> [url, ...]``)."""
    for name, urls in _named_urls(document, list_name):
        known = KnownReferrer(name, medium)
        for url in urls:
            yield str(url), known


def tally_entries(document: Any) -> Iterator[Entry]:
    """The hosts of Tally's own list (``medium -> name -> [url, ...]``)."""
    if not isinstance(document, dict) or not set(document) <= set(MEDIA):
        raise ValueError(f"expected a mapping of the media {', '.join(MEDIA)}; got {sorted(document or {})}")
    for medium, sources in document.items():
        yield from named_entries(sources, medium, f"tally-referrers.yml, {medium}")


def _under(host: str, domains: set[str]) -> bool:
    """Whether ``host`` is one of ``domains`` or under one: ``www.facebook.com`` is under ``facebook.com``."""
    while host:
        if host in domains:
            return True
        host = host.partition(".")[2]
    return False


def build_database(lists: Iterable[Iterable[Entry]]) -> ReferrerDatabase:
    """Index the lists, the first first: a host takes the first list's entry that names it or a domain above it.

    Inside one list a host listed twice keeps its first entry.
    """
    by_host: dict[str, KnownReferrer] = {}
    by_host_and_path: dict[str, dict[str, KnownReferrer]] = {}
    claimed: set[str] = set()  # the hosts (no path) of the lists read so far
    for entries in lists:
        hosts: set[str] = set()
        for url, known in entries:
            host, slash, path = url.strip().lower().partition("/")
            if _under(host, claimed):
                continue
            if slash:
                by_host_and_path.setdefault(host, {}).setdefault("/" + path, known)
            else:
                by_host.setdefault(host, known)
                hosts.add(host)
        claimed |= hosts
    return ReferrerDatabase(by_host, by_host_and_path)


def read_yaml(path: Path) -> Any:
    """One list, parsed."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(path.read_text(encoding="utf-8"), Loader=loader)


# The lists in the order a host takes its entry, each with the reader of its format.
LISTS: tuple[tuple[Path, Callable[[Any], Iterator[Entry]]], ...] = (
    (TALLY_REFERRERS_FILE, tally_entries),
    (AI_ASSISTANTS_FILE, lambda document: named_entries(document, "chatbot", AI_ASSISTANTS_FILE.name)),
    (SOCIALS_FILE, lambda document: named_entries(document, "social", SOCIALS_FILE.name)),
    (SEARCH_ENGINES_FILE, search_engine_entries),
)


def load_database(data: Path = DATA) -> ReferrerDatabase:
    """Read and index Tally's list and Matomo's three (libyaml's loader when PyYAML has it)."""
    lists: list[list[Entry]] = []
    for file, entries_of in LISTS:
        path = data / file.name
        try:
            lists.append(list(entries_of(read_yaml(path))))
        except (OSError, yaml.YAMLError, ValueError) as e:
            raise RuntimeError(f"cannot read the referrer list {path}: {e}; restore it (ingest/data/README.md)") from e
    return build_database(lists)


DATABASE = load_database()  # once per process, at import: never on the request path


def known_referrer(host: str, path: str = "") -> KnownReferrer | None:
    """The source and medium the lists give a referrer's host (lower case) and path, or None."""
    return DATABASE.lookup(host, path)
