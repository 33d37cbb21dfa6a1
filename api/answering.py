"""One question, answered the same way for every edge: the HTTP endpoint and the MCP server.

:class:`Answering` holds what a process shares between requests (the key records, the hourly
limit, the budget of raw questions, the warm table snapshots) and takes a request through the
same steps, whichever edge it came from: the key (:meth:`Answering.authenticate`), the key's
hourly limit (:meth:`Answering.admit`), then the body: parsed by :mod:`query.plausible`, checked
against the key's sites, given a slot of the raw budget when raw events may answer it
(:mod:`api.budget`), answered by :mod:`query.engine` and shaped as Plausible's v2 response
(:meth:`Answering.answer`). Anything refused is a :class:`Refused` carrying the HTTP status it
maps to, so each edge only translates it (a JSON error and a status, or an MCP tool error) and no
rule or message is written twice.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from contextlib import ExitStack
from typing import Any

import duckdb

from api.budget import RETRY_AFTER_S, NoSlot, RawBudget
from api.keys import ApiKey, keys_path, load_keys, verify
from api.raw_workers import RawWorkers, WorkerLost
from api.throttle import HourlyLimit
from query.engine import Answer, fits_aggregates, run
from query.plausible import parse_site_query
from query.raw_events import slot_limited
from query.sources import Sources
from query.spec import Query, QueryError
from tally.annotations import AnnotationError, add_annotation, annotations_for, load_annotations
from tally.log import kv
from tally.settings import Settings, SiteSettings

log = logging.getLogger("tally.api")


class Refused(Exception):
    """A request Tally will not answer: the HTTP status it maps to, the message, the part at fault.

    ``retry_after`` (seconds) is set for a 429 (the wait until the key's next hour begins, or for
    one of the key's raw questions to end) and for a 503 of the raw budget.
    """

    def __init__(self, status: int, message: str, *, part: str = "", retry_after: int = 0) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.part = part
        self.retry_after = retry_after

    def fields(self) -> dict[str, str]:
        """The error as the HTTP API's JSON body has it: ``{"error": …}``, with ``part`` when known."""
        return {"error": self.message, **({"part": self.part} if self.part else {})}


def out_of_scope(site_id: str) -> Refused:
    """The one answer (403) for any site outside a key's scope, configured or not: it repeats only
    what the key holder sent."""
    return Refused(403, f"this API key may not read site {site_id!r}")


class Keys:
    """The key records, read again whenever ``tally apikey`` changed the file."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._stamp: float | None = None
        self._keys: dict[str, ApiKey] = {}

    def current(self) -> dict[str, ApiKey]:
        """Every key record by id, as the file holds them now (so a revocation counts at once)."""
        path = keys_path(self.settings)
        stamp = path.stat().st_mtime_ns if path.exists() else None
        if stamp != self._stamp:
            self._keys, self._stamp = load_keys(self.settings), stamp
        return self._keys


class Answering:
    """The key records, the hourly limit, the raw budget and the reports of one process, and the
    steps of a question."""

    def __init__(self, settings: Settings, *, sources: Sources | None = None) -> None:
        self.settings = settings
        self.keys = Keys(settings)
        self.limit = HourlyLimit(settings.api.requests_per_hour)
        api = settings.api
        self.budget = RawBudget(slots=api.raw_slots, per_key=api.raw_slots_per_key, wait_seconds=api.raw_wait_seconds)
        self.slot_memory = f"{api.raw_slot_memory_bytes >> 20}MiB"  # DuckDB's memory_limit of a raw question
        # Raw questions in worker processes (api.raw_workers, api.raw_in_processes), unless the caller
        # gives its own sources (tests of the steps here): then in the calling thread, over those.
        self.workers = RawWorkers(api.raw_slots) if api.raw_in_processes and sources is None else None
        self.sources = sources or Sources(settings)

    def authenticate(self, presented: str) -> ApiKey | None:
        """The live record of a presented key; None for a missing, malformed, unknown or revoked one.

        None rather than :class:`Refused`: how to send a key differs by edge (a header, an
        environment variable), so each edge words its own 401.
        """
        return verify(self.keys.current(), presented.strip()) if presented else None

    def admit(self, key: ApiKey) -> None:
        """Count one request against the key's hourly limit; :class:`Refused` (429) past it."""
        wait = self.limit.take(key.key_id, time.time())
        if wait:
            per_hour = self.settings.api.requests_per_hour
            raise Refused(429, f"over this key's limit of {per_hour} requests an hour", retry_after=wait)

    def body_too_large(self) -> Refused:
        """The refusal (413) of a body over ``api.max_body_bytes``; each edge measures its own body."""
        return Refused(413, f"the request body is over {self.settings.api.max_body_bytes} bytes")

    def answer(self, key: ApiKey, body: Any) -> dict[str, Any]:
        """The v2 response (``results``, ``meta``, ``query``) to a decoded request body.

        Blocking (it reads tables, and may wait up to ``api.raw_wait_seconds`` for a slot of the raw
        budget): the HTTP edge calls it in a worker thread. Raises :class:`Refused`: 400 a body
        Tally cannot answer (naming the part) or an unknown site, 403 a site the key may not read,
        429 a raw question past the key's share of the budget, 503 one past the whole budget.
        """
        # The key's scope before anything else is read: for a site outside it, every body gets the
        # same 403, so a key for site A learns nothing of whether B exists or of B's time zone.
        site_id = body.get("site_id") if isinstance(body, dict) else None
        if isinstance(site_id, str) and site_id and not key.may_read(site_id):
            raise out_of_scope(site_id)
        try:
            query = parse_site_query(body, now=dt.datetime.now(dt.UTC), timezone_of=self.sources.timezone)
        except QueryError as e:
            raise Refused(400, str(e), part=e.part) from e
        if self.settings.site(query.site_id) is None:
            raise Refused(400, f"site {query.site_id!r} is not configured in Tally")
        try:
            answer = self._run(key, query)
        except WorkerLost as e:
            raise Refused(503, f"{e}; retry shortly", retry_after=RETRY_AFTER_S) from e
        except QueryError as e:
            raise Refused(400, str(e), part=e.part) from e
        except duckdb.OutOfMemoryException as e:  # past its slot's memory where the engine does not say so itself
            message = f"this question needs more than {self.slot_memory} of memory: narrow the range or the dimensions"
            raise Refused(400, message, part="body") from e
        if any(name.startswith("time") for name in query.dimensions):  # notes on the days of a time series
            notes = annotations_for(self.settings, query.site_id, query.start, query.end)
            answer.meta["annotations"] = [{"date": a.day.isoformat(), "text": a.text} for a in notes]
        log.info(
            "query answered",
            extra=kv(key=key.key_id, site=query.site_id, rows=len(answer.results), source=answer.meta["source"]),
        )
        return {"results": answer.results, "meta": answer.meta, "query": echo(query, body)}

    def _run(self, key: ApiKey, query: Query) -> Answer:
        """The answer of the views here, or of raw events in a slot of the raw budget (given back
        however the question ends), where its DuckDB gets the slot's memory and ``api.raw_threads``
        threads, in a worker process (:mod:`api.raw_workers`). :class:`Refused` 429 or 503 if no slot
        comes free within ``api.raw_wait_seconds``."""
        if not may_read_raw(query):
            return run(query, self.sources)
        threads = self.settings.api.raw_threads
        with ExitStack() as held:
            try:
                held.enter_context(self.budget.hold(key.key_id))
            except NoSlot as e:
                raise self._busy(key, e) from e
            if self.workers is not None:
                return self.workers.answer(query, self.settings, memory=self.slot_memory, threads=threads)
            with slot_limited(self.slot_memory, threads):
                return run(query, self.sources)

    def close(self) -> None:
        """Stop the raw question workers (the edge's shutdown)."""
        if self.workers is not None:
            self.workers.close()

    def _busy(self, key: ApiKey, full: NoSlot) -> Refused:
        """The refusal of a raw question no slot came free for: 429 when the key's own questions
        hold its share, 503 when every slot of the process is held."""
        log.info(
            "raw question refused",
            extra=kv(key=key.key_id, key_share=full.key_share, held=self.budget.held(), waiting=self.budget.waiting()),
        )
        if full.key_share:
            message = (
                f"this key already has {full.per_key} question(s) answered from raw events running"
                " (api.raw_slots_per_key); retry when one has been answered"
            )
            return Refused(429, message, retry_after=full.retry_after)
        message = f"all {full.slots} slots for questions answered from raw events are busy (api.raw_slots)"
        return Refused(503, message + "; retry shortly", retry_after=full.retry_after)

    def annotations(self, key: ApiKey, site_id: str) -> list[dict[str, str]]:
        """The annotations of a site the key may read (403 otherwise)."""
        self._may_read(key, site_id)
        return [
            {k: v for k, v in a.to_json().items() if k != "author"}
            for a in load_annotations(self.settings)
            if a.site_id == site_id
        ]

    def annotate(self, key: ApiKey, body: Any) -> dict[str, str]:
        """Add an annotation ``{"site_id", "date", "text"}`` to a site the key may read."""
        if not isinstance(body, dict) or set(body) != {"site_id", "date", "text"}:
            raise Refused(400, 'an annotation is {"site_id": …, "date": "YYYY-MM-DD", "text": …}', part="body")
        if not all(isinstance(body[k], str) for k in body):
            raise Refused(400, "site_id, date and text are strings", part="body")
        self._may_read(key, body["site_id"])
        try:
            day = dt.date.fromisoformat(body["date"])
        except ValueError as e:
            raise Refused(400, f"date {body['date']!r} is not YYYY-MM-DD", part="date") from e
        try:
            note = add_annotation(
                self.settings,
                site_id=body["site_id"],
                day=day,
                text=body["text"],
                author=f"api key {key.key_id}",
                now=dt.datetime.now(dt.UTC),
            )
        except AnnotationError as e:
            raise Refused(400, str(e), part="text") from e
        return {k: v for k, v in note.to_json().items() if k != "author"}

    def _may_read(self, key: ApiKey, site_id: str) -> None:
        if not key.may_read(site_id):
            raise out_of_scope(site_id)
        if self.settings.site(site_id) is None:
            raise Refused(400, f"site {site_id!r} is not configured in Tally")

    def readable_sites(self, key: ApiKey) -> list[SiteSettings]:
        """The configured sites this key may read, in the configuration's order."""
        return [site for site in self.settings.sites if key.may_read(site.site_id)]


def may_read_raw(query: Query) -> bool:
    """Whether raw events may answer ``query``: any the views do not fit, and any filtered one (a
    filter on the breakdown's own dimension is answered from raw events when the view's list of
    values was cut at the limit: :func:`query.engine.run`)."""
    return bool(query.filters) or not fits_aggregates(query)


def echo(query: Query, body: dict[str, Any]) -> dict[str, Any]:
    """The query as answered: the request's own parts, with the range resolved to dates."""
    echoed: dict[str, Any] = {
        k: body[k] for k in ("site_id", "metrics", "dimensions", "filters", "order_by", "include") if k in body
    }
    echoed["date_range"] = (
        [t.isoformat() for t in query.between] if query.between else [query.start.isoformat(), query.end.isoformat()]
    )
    echoed["order_by"] = [[name, "desc" if desc else "asc"] for name, desc in query.order_by]
    echoed["pagination"] = {"limit": query.limit, "offset": query.offset}
    return echoed
