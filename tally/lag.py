"""Lag as time, and the alert when it grows too long (``alerts.lag_minutes``).

A lag in messages says little on its own (2,000 messages is nothing at 1,000 events/s and a day
at one a minute). So a consumer of the log (the archiver, the streaming views) keeps an
:class:`OffsetClock`: when it learns Kafka's end offsets it records them with the time, and its
lag is how long ago Kafka's end was where the consumer is now; everything Kafka held then is
processed, something Kafka got later is not. It is exact to the spacing of the samples and needs
no event time (a visitor's clock, or a beacon queued offline, cannot make it wrong).

:class:`LagAlarm` turns that figure into one log line when the lag passes the limit and one when
it is back under it, so a lag that keeps growing is reported once, not on every batch.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import deque
from collections.abc import Mapping

from tally.log import kv

Partition = tuple[str, int]  # topic, partition
Offsets = Mapping[Partition, int]


class OffsetClock:
    """Kafka's end offsets over time, to tell how long ago the log's end was at a given position.

    ``horizon`` bounds the history kept; a lag longer than it is reported as at least ``horizon``.
    """

    def __init__(self, horizon: dt.timedelta = dt.timedelta(hours=2)) -> None:
        self.horizon = horizon
        self._samples: deque[tuple[dt.datetime, dict[Partition, int]]] = deque()

    def record_end(self, when: dt.datetime, ends: Offsets) -> None:
        """Kafka's end offset (next offset to be written) of each partition, as seen at ``when``."""
        self._samples.append((when, dict(ends)))
        while len(self._samples) > 1 and when - self._samples[1][0] >= self.horizon:
            self._samples.popleft()

    def lag(self, now: dt.datetime, processed: Offsets) -> dt.timedelta | None:
        """How long ago everything up to ``processed`` was Kafka's end; zero when caught up with the
        newest sample, None before the first sample. A partition missing from ``processed`` counts
        as nothing processed."""
        if not self._samples:
            return None
        behind_since: dt.datetime | None = None
        for when, ends in reversed(self._samples):  # newest first
            if all(processed.get(p, 0) >= end for p, end in ends.items()):
                break  # the consumer had everything Kafka held at ``when``
            behind_since = when
        if behind_since is None:
            return dt.timedelta(0)
        return max(dt.timedelta(0), now - behind_since)


class LagAlarm:
    """One warning when ``name``'s lag passes ``limit``, one info line when it is back under it."""

    def __init__(self, name: str, limit: dt.timedelta, log: logging.Logger) -> None:
        self.name, self.limit, self.log = name, limit, log
        self.alerting = False

    def observe(self, lag: dt.timedelta | None) -> bool:
        """Record the current lag (None = unknown, changes nothing); return whether it is over the limit."""
        if lag is None:
            return self.alerting
        over = lag > self.limit
        if over and not self.alerting:
            self.log.warning(
                f"alert: {self.name} lag over the limit",
                extra=kv(
                    alert="lag",
                    lag_minutes=round(lag.total_seconds() / 60, 1),
                    limit_minutes=round(self.limit.total_seconds() / 60, 1),
                    setting="alerts.lag_minutes",
                ),
            )
        elif self.alerting and not over:
            self.log.info(
                f"alert over: {self.name} lag back under the limit",
                extra=kv(alert="lag", lag_minutes=round(lag.total_seconds() / 60, 1)),
            )
        self.alerting = over
        return over


def describe_lag(lag: dt.timedelta) -> str:
    """``"3 min"``, ``"45 s"``, ``"2 h 5 min"``: a lag for people."""
    seconds = int(lag.total_seconds())
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"
