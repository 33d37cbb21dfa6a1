"""Known referrers from Snowplow's referer-parser database (``ingest/data/referers.yml``), read once.

The database names the source behind a referrer host (``mail.google.com`` is Gmail, ``t.co`` is
Twitter) and the kind of medium it is: ``search``, ``email``, ``social``, ``paid``, ``chatbot`` or
``unknown`` (a known source of no particular medium, such as ``support.google.com``). The
vendored file, its version and licence are described in ``ingest/data/README.md``.

Lookup is the reference parsers' own: the host with its path, then the host with its first path
segment, then the host alone; then the same for each parent domain (``news.google.co.uk``, then
``google.co.uk``). Pure: no network; the lookup is two dict probes per domain level.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REFERERS_FILE = Path(__file__).with_name("data") / "referers.yml"
MEDIA = ("search", "email", "social", "paid", "chatbot", "unknown")


@dataclass(frozen=True, slots=True)
class KnownReferrer:
    """A referrer the database knows: its source's name and the kind of medium it is."""

    source: str  # "Google", "Gmail", "Reddit"
    medium: str  # one of MEDIA


@dataclass(frozen=True)
class ReferrerDatabase:
    """Entries by host, and by host and path for the few entries that name a path."""

    by_host: Mapping[str, KnownReferrer]
    by_host_and_path: Mapping[str, Mapping[str, KnownReferrer]]  # host -> path ("/imgres") -> entry

    def lookup(self, host: str, path: str = "") -> KnownReferrer | None:
        """The entry for ``host`` (lower case) and ``path``, trying each parent domain in turn."""
        first_segment = "/" + path.split("/", 2)[1] if path.startswith("/") else ""
        while host:
            paths = self.by_host_and_path.get(host)
            if paths is not None:
                found = paths.get(path) or paths.get(first_segment)
                if found is not None:
                    return found
            found = self.by_host.get(host)
            if found is not None:
                return found
            host = host.partition(".")[2]
        return None


def parse_database(document: Any) -> ReferrerDatabase:
    """Index a referers.yml document (``medium -> source -> {domains: [...]}``).

    A host listed twice keeps its first entry (the file lists the ``unknown`` medium first).
    """
    if not isinstance(document, dict) or not set(document) <= set(MEDIA):
        raise ValueError(f"expected a mapping of the media {', '.join(MEDIA)}; got {sorted(document or {})}")
    by_host: dict[str, KnownReferrer] = {}
    by_host_and_path: dict[str, dict[str, KnownReferrer]] = {}
    for medium, sources in document.items():
        for source, entry in sources.items():
            known = KnownReferrer(str(source), medium)
            for domain in entry["domains"]:
                host, slash, path = str(domain).lower().partition("/")
                if slash:
                    by_host_and_path.setdefault(host, {}).setdefault("/" + path, known)
                else:
                    by_host.setdefault(host, known)
    return ReferrerDatabase(by_host, by_host_and_path)


def load_database(path: Path = REFERERS_FILE) -> ReferrerDatabase:
    """Read and index the vendored database (libyaml's loader when PyYAML has it: ~40 ms)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        return parse_database(yaml.load(path.read_text(encoding="utf-8"), Loader=loader))
    except (OSError, yaml.YAMLError, ValueError, KeyError, AttributeError) as e:
        raise RuntimeError(f"cannot read the referrer database {path}: {e}; restore it (ingest/data/README.md)") from e


DATABASE = load_database()  # once per process, at import: never on the request path


def known_referrer(host: str, path: str = "") -> KnownReferrer | None:
    """The source and medium the database gives a referrer's host (lower case) and path, or None."""
    return DATABASE.lookup(host, path)
