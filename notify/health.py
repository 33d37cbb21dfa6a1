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
import pyarrow.compute as pc

from query.aggregates import Aggregates, Range
from tally.lag import describe_lag
from tally.log import kv
from tally.quarantine import quarantined
from tally.settings import Settings
from tally.storage import find_table
from tally.tables import RAW_PAGEVIEWS, TRAFFIC_1M

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
        archive = describe_lag(self.archive_lag) if self.archive_lag is not None else "unknown (archiver metrics off)"
        return [
            f"status: {self.status}",
            f"views lag: {describe_lag(self.views_lag)}",
            f"archive lag: {archive}",
            f"quarantined partitions: {', '.join(self.quarantined) if self.quarantined else 'none'}",
        ]


def newest_window_end(agg: Aggregates, site_id: str, today: dt.date) -> dt.datetime | None:
    """The end of the site's newest ``agg.traffic_1m`` window today or yesterday, or None."""
    days = Range(today - dt.timedelta(days=1), today)
    rows = agg.rows(TRAFFIC_1M.table, site_id, days, ["window_end"], pc.field("dimension") == "all")
    if rows.empty:
        return None
    newest = rows["window_end"].max()
    return newest.to_pydatetime().astimezone(dt.UTC) if newest is not None else None


def newest_event(settings: Settings, site_id: str, today: dt.date) -> dt.datetime | None:
    """The newest archived non-bot event of a site today or yesterday (event time), or None."""
    table = find_table(settings, RAW_PAGEVIEWS)
    if table is None:
        return None
    condition = (
        (pc.field("event_date") >= today - dt.timedelta(days=1))
        & (pc.field("event_date") <= today)
        & (pc.field("site_id") == site_id)
        & ~pc.field("is_bot")
    )
    times = table.to_pyarrow_dataset().to_table(columns=["event_time"], filter=condition).column("event_time")
    newest = pc.max(times).as_py() if len(times) else None
    return dt.datetime.fromtimestamp(newest / 1000, dt.UTC) if newest is not None else None


def views_lag(newest_raw: dt.datetime | None, newest_window: dt.datetime | None, today: dt.date) -> dt.timedelta:
    """How far the views trail the archived events (zero when level or nothing archived), as the dashboard says."""
    if newest_raw is None:
        return dt.timedelta(0)
    since = newest_window or dt.datetime.combine(today - dt.timedelta(days=1), dt.time(), dt.UTC)
    return max(dt.timedelta(0), newest_raw - since)


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
    behind = views_lag(newest_event(settings, site_id, today), newest_window_end(agg, site_id, today), today)
    return Health(
        views_lag=behind,
        archive_lag=archive_lag(),
        quarantined=quarantined_of(settings, site_id),
        limit=dt.timedelta(minutes=settings.alerts.lag_minutes),
    )
