"""The data-health status a report carries and the lag and quarantine alerts judge.

The dashboard's data-health panel lives in another app, so its table reads are made again here
from the same tables: the views' lag is the newest archived event of the site minus the end of
its newest ``agg.traffic_1m`` window; quarantined partitions come from ``tally.quarantine``. The
archive lag is the archiver's own figure, ``tally_archiver_lag_seconds`` on its metrics port
(how long ago Kafka's end was where the raw tables are now): reading Kafka's watermarks would
take a Kafka client, which this app does not load.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from query.aggregates import Aggregates
from query.freshness import newest_event, newest_window_end, views_lag
from tally.lag import describe_lag
from tally.log import kv
from tally.quarantine import quarantined
from tally.settings import Settings

log = logging.getLogger("tally.notify")

ArchiveLagProbe = Callable[[], dt.timedelta | None]
LAG_METRIC = "tally_archiver_lag_seconds"


@dataclass(frozen=True)
class Health:
    """One site's data health at one moment; ``archive_lag`` None = unknown (archiver not answering)."""

    views_lag: dt.timedelta
    archive_lag: dt.timedelta | None
    quarantined: tuple[str, ...]  # "<table> <date> (<checker>)"
    limit: dt.timedelta  # alerts.lag_minutes

    @property
    def problems(self) -> list[str]:
        """What needs attention, in words; empty when all is well."""
        found = []
        if self.views_lag > self.limit:
            found.append(f"the views are {describe_lag(self.views_lag)} behind the archived events")
        if self.archive_lag is not None and self.archive_lag > self.limit:
            found.append(f"the archive is {describe_lag(self.archive_lag)} behind Kafka")
        if self.quarantined:
            found.append(f"{len(self.quarantined)} quarantined partition(s): {', '.join(self.quarantined[:5])}")
        return found

    @property
    def status(self) -> str:
        """``ok`` or ``attention``, as one word for a digest's headline."""
        return "attention" if self.problems else "ok"

    def lines(self) -> list[str]:
        """The status for people: one line per figure."""
        archive = (
            describe_lag(self.archive_lag)
            if self.archive_lag is not None
            else "unknown (the archiver's metrics did not answer)"
        )
        return [
            f"status: {self.status}",
            f"views lag: {describe_lag(self.views_lag)}",
            f"archive lag: {archive}",
            f"quarantined partitions: {', '.join(self.quarantined) if self.quarantined else 'none'}",
        ]


def quarantined_of(settings: Settings, site_id: str) -> tuple[str, ...]:
    """Quarantined partitions that hold this site's figures (a one-site audit speaks of its own site only)."""
    held = [q for q in quarantined(settings) if q.checker == f"audit:{site_id}" or not q.checker.startswith("audit:")]
    return tuple(f"{q.table} {q.partition_date} ({q.checker})" for q in held)


def archiver_lag(settings: Settings, *, timeout: float = 2.0) -> dt.timedelta | None:
    """The archiver's lag as time, from its metrics; None when they are off or do not answer."""
    port = settings.archiver.metrics_port
    if not port:
        return None
    try:
        answer = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=timeout)
        answer.raise_for_status()
    except httpx.HTTPError as e:
        log.warning("archive lag unknown", extra=kv(reason=str(e), port=port))
        return None
    for line in answer.text.splitlines():
        name, _, value = line.partition(" ")
        if name == LAG_METRIC:
            return dt.timedelta(seconds=float(value))
    return None


def site_health(
    settings: Settings, agg: Aggregates, site_id: str, now: dt.datetime, archive_lag: ArchiveLagProbe
) -> Health:
    """The data health of one site now."""
    today = now.date()
    behind = views_lag(newest_event(agg, site_id, today), newest_window_end(agg, site_id, today), today)
    return Health(
        views_lag=behind,
        archive_lag=archive_lag(),
        quarantined=quarantined_of(settings, site_id),
        limit=dt.timedelta(minutes=settings.alerts.lag_minutes),
    )
