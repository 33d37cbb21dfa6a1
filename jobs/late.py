"""Late events: rows Spark drops because they are behind the watermark are counted, not lost.

Spark reports, per micro-batch and stateful operator, how many input rows it dropped for being
older than the watermark. A listener collects those figures; the job's main loop records them
in ``agg.late_events`` (one row per query and batch, keyed so a replayed batch is not counted
twice) and exports them as a Prometheus counter. The events themselves are safe in
``raw.pageviews``: a backfill of their date counts them (``tally backfill``).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter, Gauge
from pyspark.sql import SparkSession
from pyspark.sql.streaming.listener import StreamingQueryListener

from jobs.delta_sink import upsert
from tally.lag import LagAlarm
from tally.log import kv
from tally.settings import Settings
from tally.tables import LATE_EVENTS

log = logging.getLogger("tally.jobs.late")

LATE_ROWS = Counter("tally_views_late_events", "Events dropped by a view for being behind the watermark", ["query"])
BATCHES = Counter("tally_views_batches", "Micro-batches completed", ["query"])
INPUT_ROWS = Counter("tally_views_input_rows", "Kafka rows read by a view query", ["query"])
WATERMARK = Gauge("tally_views_watermark_seconds", "Event-time watermark of a view query (epoch s)", ["query"])
BATCH_SECONDS = Gauge("tally_views_batch_seconds", "Duration of a view query's last micro-batch", ["query"])
LAG_SECONDS = Gauge(
    "tally_views_lag_seconds", "Longest an event of a view query's last batch may have waited in Kafka", ["query"]
)

_SCHEMA = "query STRING, batch_id BIGINT, recorded_at TIMESTAMP, watermark TIMESTAMP, late_rows BIGINT, event_date DATE"


@dataclass(frozen=True)
class LateBatch:
    query: str
    batch_id: int
    recorded_at: dt.datetime
    watermark: dt.datetime | None
    late_rows: int


def _parse_time(value: Any) -> dt.datetime | None:
    if not value:
        return None
    return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def batch_lag(
    previous_start: dt.datetime | None, start: dt.datetime, duration: dt.timedelta, rows: int
) -> dt.timedelta:
    """The longest an event of a batch may have waited: every batch reads all Kafka holds when it
    starts, so a batch's events arrived after the previous batch started, and were done when this
    one ended. A batch that read nothing leaves nothing waiting."""
    if not rows:
        return dt.timedelta(0)
    return start + duration - (previous_start or start)


class LateEventsListener(StreamingQueryListener):
    """Collects per-batch late-row counts (and progress metrics) from every view query, and
    raises the lag alert (``alerts.lag_minutes``) of a query whose events wait too long."""

    def __init__(self, *, lag_limit: dt.timedelta = dt.timedelta(minutes=10)) -> None:
        self._pending: list[LateBatch] = []
        self._lock = threading.Lock()
        self.total_late = 0
        self.lag_limit = lag_limit
        self._alarms: dict[str, LagAlarm] = {}
        self._last_start: dict[str, dt.datetime] = {}

    def onQueryStarted(self, event: Any) -> None:
        log.info("view query started", extra=kv(query=event.name, id=str(event.id)))

    def onQueryProgress(self, event: Any) -> None:
        progress = event.progress
        name = progress.name or str(progress.id)
        late = sum(op.numRowsDroppedByWatermark for op in progress.stateOperators)
        BATCHES.labels(name).inc()
        INPUT_ROWS.labels(name).inc(progress.numInputRows)
        durations = progress.durationMs or {}
        BATCH_SECONDS.labels(name).set(durations.get("triggerExecution", 0) / 1000)
        if progress.numInputRows:
            # One line per batch that read events: where a view's latency goes (the sink is addBatch).
            log.info(
                "view batch",
                extra=kv(
                    query=name,
                    batch_id=progress.batchId,
                    rows=progress.numInputRows,
                    total_ms=durations.get("triggerExecution"),
                    sink_ms=durations.get("addBatch"),
                ),
            )
        self._observe_lag(name, _parse_time(progress.timestamp), durations.get("triggerExecution", 0), progress)
        watermark = _parse_time((progress.eventTime or {}).get("watermark"))
        if watermark is not None:
            WATERMARK.labels(name).set(watermark.timestamp())
        if late:
            LATE_ROWS.labels(name).inc(late)
            recorded = _parse_time(progress.timestamp) or dt.datetime.now(dt.UTC)
            with self._lock:
                self._pending.append(LateBatch(name, progress.batchId, recorded, watermark, late))
                self.total_late += late
            log.warning(
                "late events dropped by a view; a backfill of their date counts them",
                extra=kv(query=name, batch_id=progress.batchId, late_rows=late, watermark=str(watermark)),
            )

    def _observe_lag(self, name: str, start: dt.datetime | None, duration_ms: int, progress: Any) -> None:
        if start is None:
            return
        lag = batch_lag(
            self._last_start.get(name), start, dt.timedelta(milliseconds=duration_ms), progress.numInputRows
        )
        self._last_start[name] = start
        LAG_SECONDS.labels(name).set(lag.total_seconds())
        alarm = self._alarms.setdefault(name, LagAlarm(f"views ({name})", self.lag_limit, log))
        alarm.observe(lag)

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        log.info("view query terminated", extra=kv(id=str(event.id), error=event.exception or ""))

    def flush(self, spark: SparkSession, settings: Settings) -> int:
        """Record pending late-batch figures in ``agg.late_events``; returns how many rows."""
        with self._lock:
            pending, self._pending = self._pending, []
        if not pending:
            return 0
        rows = [(b.query, b.batch_id, b.recorded_at, b.watermark, b.late_rows, b.recorded_at.date()) for b in pending]
        upsert(spark.createDataFrame(rows, _SCHEMA), LATE_EVENTS, settings)
        return len(rows)
