"""Helpers of the leak scanner's unit tests: one scan of a folder, and what it found as leaks."""

from __future__ import annotations

from pathlib import Path

from quality.leaks import Needles, ScanResult, scan_files
from tests.faults.payloads import PLANTED

IP = "198.51.100.23"


def scan(root: Path, needles: tuple[str, ...] = PLANTED, *, ip: str = IP, kafka_decoded: bool = False) -> ScanResult:
    """``scan_files`` over ``root`` for ``ip`` and ``needles``; ``kafka_decoded`` as a scan that read the topics."""
    result = ScanResult()
    scan_files(root, {ip}, result, needles=Needles.of(needles), kafka_decoded=kafka_decoded)
    return result


def found(result: ScanResult) -> set[tuple[str, str, str]]:
    """The leaks as (file name, what was found, its form)."""
    return {(Path(m.where.split(" ")[0]).name, m.found, m.form) for m in result.leaks}
