"""Sites at runtime in the Stats API: it follows the sites topic, and admin keys manage sites.

The API follows ``kafka.sites_topic`` as every ingest worker does (:func:`topics.sites.follow_sites`; records
and the fold over ``sites:`` are :mod:`tally.site_registry`'s), so a site added with
``tally site add`` can be queried, and keys for it checked, within seconds. An admin key
(``tally apikey create --admin``) manages sites over HTTP, writing the same records as ``tally site``:

- ``GET /api/v1/sites``: every configured site (``origin``: ``seed`` or ``runtime``) and the removed ids;
- ``POST /api/v1/sites``: add a site (body: its settings, as ``sites:`` in conf/ has them); 409 if it exists;
- ``PUT /api/v1/sites/{site_id}``: write a site again, whole (added if new);
- ``DELETE /api/v1/sites/{site_id}``: remove it (ingest refuses its events; its data stays); 404 if unknown.

Errors: 401 no or a bad key, 403 a key that is not an admin key, 400 a bad site (naming the field),
503 Kafka not reachable (nothing changed).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from api.answering import Answering, Refused
from api.keys import ApiKey
from tally.changes import API, record_site_change
from tally.log import kv
from tally.settings import Settings, SettingsError, SiteSettings
from tally.site_registry import SiteChange, SiteRegistry, new_site, site_json
from topics.follower import TopicFollower
from topics.sites import SiteWriteFailed, change_record, follow_sites, write_site_record

log = logging.getLogger("tally.api.sites")

READY_WAIT_S = 5.0  # an admin request waits this long for the topic to be read, then gets 503
WRITE_TIMEOUT_S = 10.0


class SiteAdmin:
    """The API's current sites, its follower (started by the app's lifespan) and site writes."""

    def __init__(self, settings: Settings, answering: Answering) -> None:
        self.settings = settings
        self.answering = answering
        self.registry = SiteRegistry(seed=settings.sites)
        self.follower: TopicFollower | None = None
        self._waited = False

    def refresh(self) -> None:
        """Give the answering code the current sites (a new Settings, swapped in whole)."""
        current = self.settings.with_sites(self.registry.sites())
        self.answering.settings = current
        self.answering.sources.settings = current

    def start(self) -> None:
        """Follow the sites topic (the app's lifespan; stopped by :meth:`close`)."""
        self.follower = follow_sites(
            self.settings.kafka, self.registry, reader="api", on_change=lambda _: self.refresh()
        )

    def close(self) -> None:
        if self.follower is not None:
            self.follower.close()

    async def ready(self) -> None:
        """Wait until the topic has been read to its end (bounded); :class:`Refused` 503 if not."""
        caught_up = self.follower is not None and await asyncio.to_thread(self.follower.caught_up.wait, READY_WAIT_S)
        if not caught_up:
            raise Refused(
                503, f"the sites topic cannot be read from Kafka at {self.settings.kafka.servers}; retry later"
            )

    async def settled(self) -> bool:
        """Whether the topic has been read to its end; the first call waits for it (bounded), the
        later ones do not (``tally mcp``: a session whose broker is down answers from conf/'s sites)."""
        if self.follower is None:
            return False
        if not self._waited:
            self._waited = True
            if not await asyncio.to_thread(self.follower.caught_up.wait, READY_WAIT_S):
                log.warning(
                    "sites topic not read; only conf/'s sites are known", extra=kv(servers=self.settings.kafka.servers)
                )
        return self.follower.caught_up.is_set()

    def listing(self) -> dict[str, Any]:
        sites = [site_json(s) | {"origin": self.registry.origin(s.site_id)} for s in self.registry.sites()]
        return {"sites": sites, "removed": list(self.registry.removed())}

    def write(self, change: SiteChange, *, by: ApiKey | None = None) -> None:
        """Append a change's record (acks=all), then apply it here at once: this process reads its own
        write; the audit trail names the key (``by``) that made it."""
        before = self.registry.get(change.site_id)
        try:
            write_site_record(self.settings.kafka, change.site_id, change_record(change), timeout=WRITE_TIMEOUT_S)
        except SiteWriteFailed as e:
            raise Refused(503, f"Kafka did not store the change ({e}); retry later") from e
        self.registry.apply_change(change)
        self.refresh()
        actor = f"api key {by.key_id} ({by.name})" if by is not None else "api"
        record_site_change(self.settings, actor=actor, via=API, before=before, after=change.site)


def _site_of(body: Any, site_id: str | None = None) -> SiteSettings:
    if not isinstance(body, dict):
        raise Refused(400, 'a site is a JSON object, e.g. {"site_id": "example.com", "domains": ["example.com"]}')
    if site_id is not None and body.setdefault("site_id", site_id) != site_id:
        raise Refused(400, f"the body's site_id is not the path's ({site_id})", part="site_id")
    if not body.get("domains"):
        raise Refused(400, 'give the hosts whose pages send for the site: "domains": ["example.com"]', part="domains")
    try:
        return new_site(body)
    except SettingsError as e:
        raise Refused(400, str(e)) from e


async def _admin(request: Request) -> tuple[SiteAdmin, ApiKey]:
    answering: Answering = request.app.state.answering
    scheme, _, presented = request.headers.get("authorization", "").partition(" ")
    key = answering.authenticate(presented) if scheme.lower() == "bearer" else None
    if key is None:
        raise Refused(401, "missing or invalid API key: send 'Authorization: Bearer <key>' (tally apikey create)")
    if not key.may_manage_sites:
        raise Refused(403, "this API key may not manage sites; create an admin key: tally apikey create --admin")
    answering.admit(key)
    admin: SiteAdmin = request.app.state.site_admin
    await admin.ready()
    return admin, key


async def _body(request: Request) -> Any:
    """The decoded JSON body: 413 past ``api.max_body_bytes``, 400 for bad JSON. Read whole before
    the cap is checked: only an admin key gets this far."""
    answering: Answering = request.app.state.answering
    body = await request.body()
    if len(body) > answering.settings.api.max_body_bytes:
        raise answering.body_too_large()
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        raise Refused(400, "the request body is not valid JSON") from e


async def sites_endpoint(request: Request) -> Response:
    """``GET /api/v1/sites`` lists the sites; ``POST`` adds one (409 if it is configured already)."""
    try:
        admin, key = await _admin(request)
        if request.method == "GET":
            return JSONResponse(admin.listing())
        site = _site_of(await _body(request))
        if admin.registry.get(site.site_id) is not None:
            raise Refused(
                409, f"site {site.site_id} is configured already; PUT /api/v1/sites/{site.site_id} changes it"
            )
        await asyncio.to_thread(functools.partial(admin.write, by=key), SiteChange(site.site_id, site, _now_ms()))
        log.info("site added", extra=kv(site=site.site_id, key=key.key_id))
        return JSONResponse(site_json(site), status_code=201)
    except Refused as refused:
        return _refusal(refused)


async def site_endpoint(request: Request) -> Response:
    """``PUT /api/v1/sites/{site_id}`` writes a site whole; ``DELETE`` removes it (404 if unknown)."""
    site_id: str = request.path_params["site_id"]
    try:
        admin, key = await _admin(request)
        if request.method == "DELETE":
            if admin.registry.get(site_id) is None:
                raise Refused(404, f"no site {site_id!r} is configured; GET /api/v1/sites lists them")
            await asyncio.to_thread(functools.partial(admin.write, by=key), SiteChange(site_id, None, _now_ms()))
            log.info("site removed", extra=kv(site=site_id, key=key.key_id))
            return JSONResponse({"removed": site_id})
        site = _site_of(await _body(request), site_id)
        await asyncio.to_thread(functools.partial(admin.write, by=key), SiteChange(site_id, site, _now_ms()))
        log.info("site written", extra=kv(site=site_id, key=key.key_id))
        return JSONResponse(site_json(site))
    except Refused as refused:
        return _refusal(refused)


def _refusal(refused: Refused) -> JSONResponse:
    headers = {"Retry-After": str(refused.retry_after)} if refused.retry_after else None
    return JSONResponse(refused.fields(), status_code=refused.status, headers=headers)


def _now_ms() -> int:
    return int(time.time() * 1000)
