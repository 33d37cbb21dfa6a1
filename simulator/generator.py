"""Send the population's beacons over HTTP at a fixed arrival rate (open loop) until told to stop."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import time
from dataclasses import dataclass

import httpx

from simulator.population import Beacon, Population
from tally.log import kv
from tally.settings import Settings

log = logging.getLogger("tally.traffic")


@dataclass
class Sent:
    accepted: int = 0
    failed: int = 0


async def _send(client: httpx.AsyncClient, url: str, beacon: Beacon, sent: Sent) -> None:
    headers = {"Content-Type": "text/plain", "User-Agent": beacon.user_agent, "X-Forwarded-For": beacon.ip}
    try:
        response = await client.post(url, content=json.dumps(beacon.payload), headers=headers)
        if response.status_code == 202:
            sent.accepted += 1
        else:
            sent.failed += 1
            log.warning("beacon refused", extra=kv(status=response.status_code, body=response.text[:200]))
    except httpx.HTTPError as e:
        sent.failed += 1
        log.warning("beacon not sent", extra=kv(error=repr(e)))


async def _run(settings: Settings, rate: float, duration: float, target: str) -> Sent:
    site = settings.site(settings.traffic.site_id)
    host = site.domains[0] if site and site.domains else settings.traffic.site_id
    population = Population(
        site_id=settings.traffic.site_id, host=host, visitors=settings.traffic.visitors, seed=int(time.time())
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    sent, tasks = Sent(), set()
    url = target.rstrip("/") + "/api/event"
    started = time.monotonic()
    log.info("traffic started", extra=kv(rate=rate, target=url))
    async with httpx.AsyncClient(timeout=10) as client:
        tick = 0
        while not stop.is_set() and (duration <= 0 or time.monotonic() - started < duration):
            tick += 1
            for beacon in population.next_beacons(int(time.time() * 1000)):
                task = asyncio.create_task(_send(client, url, beacon, sent))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            # Open loop: the next arrival is scheduled by the clock, never by a response.
            delay = started + tick / rate - time.monotonic()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=delay)
        if tasks:
            await asyncio.gather(*tasks)
    log.info("traffic stopped", extra=kv(accepted=sent.accepted, failed=sent.failed))
    return sent


def run_traffic(settings: Settings, *, rate: float, duration: float, target: str) -> Sent:
    """Generate traffic at ``rate`` actions/s for ``duration`` seconds (0 = until SIGINT/SIGTERM)."""
    assert rate > 0, "rate must be positive"
    return asyncio.run(_run(settings, rate, duration, target))
