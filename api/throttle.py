"""Requests per API key per clock hour (Plausible's default is 600): past it, how long to wait."""

from __future__ import annotations

import threading

HOUR_S = 3600


class HourlyLimit:
    """A fixed window per key: at most ``per_hour`` requests in each clock hour."""

    def __init__(self, per_hour: int) -> None:
        assert per_hour >= 1, "settings refuse api.requests_per_hour below 1"
        self.per_hour = per_hour
        self._hour = -1
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def take(self, key_id: str, now: float) -> int:
        """Count one request of ``key_id``; 0 if allowed, else the seconds until the next hour begins."""
        hour = int(now // HOUR_S)
        with self._lock:
            if hour > self._hour:  # never back to an earlier hour (clock steps)
                self._hour, self._counts = hour, {}
            used = self._counts.get(key_id, 0)
            if used >= self.per_hour:
                return max(1, int((self._hour + 1) * HOUR_S - now))
            self._counts[key_id] = used + 1
            return 0
