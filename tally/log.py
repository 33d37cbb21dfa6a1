"""Structured logging: one line per meaningful event, ``time level logger event key=value …``."""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections import Counter
from typing import Any


class KeyValueFormatter(logging.Formatter):
    """Formats ``log.info("event", extra={"fields": {...}})`` as one greppable line."""

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = getattr(record, "fields", {})
        parts = [
            self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            record.levelname.lower(),
            record.name,
            record.getMessage(),
        ]
        parts += [f"{k}={json.dumps(v) if isinstance(v, str) and ' ' in v else v}" for k, v in fields.items()]
        line = " ".join(str(p) for p in parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup_logging(level: str = "INFO") -> None:
    """Route every logger to stderr with the key=value format (idempotent)."""
    root = logging.getLogger()
    if any(isinstance(h.formatter, KeyValueFormatter) for h in root.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(KeyValueFormatter())
    root.addHandler(handler)
    root.setLevel(level)
    for noisy in ("py4j", "urllib3", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


class FailureLog:
    """Unexpected failures of one process, logged so that a flood of them cannot fill the disk:
    the first of each kind (exception class) with its traceback, each later one as one line with
    the kind and how many there have been."""

    def __init__(self, log: logging.Logger, event: str) -> None:
        self.log = log
        self.event = event
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def record(self, error: BaseException, **fields: Any) -> int:
        """Log ``error`` (call it from the ``except`` block); the count of its kind so far."""
        kind = type(error).__name__
        with self._lock:
            self.counts[kind] += 1
            count = self.counts[kind]
        self.log.error(self.event, exc_info=error if count == 1 else None, extra=kv(kind=kind, count=count, **fields))
        return count


def kv(**fields: Any) -> dict[str, dict[str, Any]]:
    """``log.info("archived", extra=kv(rows=10))``: structured fields for one log line."""
    return {"fields": fields}
