"""Resident memory over a soak: the slope of a series and its verdict, and the views job by part (its
Python driver, its Spark JVM, the Python workers the JVM starts, and the JVM's own parts from its
native memory tracking).

``bench.soak --native-memory`` starts the views job with ``-XX:NativeMemoryTracking=summary`` and asks
``jcmd <pid> VM.native_memory summary`` once a minute. What the JVM tracks is split into the parts
that can grow: the heap, class metadata (metaspace and class space), the JIT's code cache, thread
stacks, and the rest of what it tracks (symbols, the compiler's arenas, GC tables, NMT itself). What
it does not track is the process's resident size less all of that: memory native libraries take
with malloc, mostly RocksDB's state store (bounded by
``spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB``) and the allocator's own overhead.
NMT's committed figures are what the JVM asked the kernel for; the untracked part is therefore an
estimate (committed but untouched pages are not resident).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import subprocess
from pathlib import Path
from unittest import mock

import numpy as np
import psutil

from bench.stack import members
from ops.processes import Supervisor
from tally.settings import load_settings

NMT_OPTION = "-XX:NativeMemoryTracking=summary"
# NMT's category name -> the part reported (MiB committed). Anything else is "other tracked".
PARTS = {
    "Java Heap": "heap",
    "Class": "class metadata",
    "Metaspace": "class metadata",
    "Code": "code cache",
    "Thread": "threads",
}
OTHER = "other tracked"
UNTRACKED = "untracked"
_TOTAL = re.compile(r"^Total: reserved=\d+KB, committed=(\d+)KB", re.M)
_CATEGORY = re.compile(r"^-\s+(.+?) \(reserved=\d+KB, committed=(\d+)KB\)", re.M)


def slope_mib_per_hour(seconds: list[float], mib: list[float]) -> float:
    """Least-squares slope of the second half of a series, in MiB per hour."""
    half = len(seconds) // 2
    x, y = np.array(seconds[half:]), np.array(mib[half:])
    if len(x) < 3:
        return float("nan")
    return float(np.polyfit(x, y, 1)[0] * 3600)


def memory_verdict(slope: float, size: float) -> str:
    """Flat: it grows or shrinks by under 5% of its size (or 10 MiB) an hour; a NaN slope (fewer than
    three samples in the second half) has no verdict."""
    if math.isnan(slope):
        return "too few samples in the second half for a slope"
    if abs(slope) < max(0.05 * size, 10.0):
        return "flat"
    return "growing" if slope > 0 else "shrinking"


def parse_summary(text: str) -> dict[str, float] | None:
    """MiB committed per part from ``VM.native_memory summary`` output; None if it has no total
    (NMT off, or the JVM did not answer)."""
    total = _TOTAL.search(text)
    if total is None:
        return None
    parts = dict.fromkeys([*PARTS.values(), OTHER], 0.0)
    for match in _CATEGORY.finditer(text):
        parts[PARTS.get(match.group(1).strip(), OTHER)] += int(match.group(2)) / 1024
    parts["tracked"] = int(total.group(1)) / 1024
    return parts


def by_part(pid: int, rss_mib: float, timeout: float = 30.0) -> dict[str, float]:
    """The JVM ``pid``'s parts in MiB committed, plus "untracked" (resident less committed); empty,
    said once per reason, if ``jcmd`` is missing or fails, or the JVM runs without NMT."""
    jcmd = shutil.which("jcmd")
    if jcmd is None:
        _say_once("jcmd is not on the PATH")
        return {}
    try:
        out = subprocess.run(
            [jcmd, str(pid), "VM.native_memory", "summary"], capture_output=True, text=True, timeout=timeout
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        _say_once(f"jcmd failed: {e}")
        return {}
    parts = parse_summary(out.stdout)
    if parts is None:
        _say_once(f"no native memory summary from the JVM: {(out.stdout + out.stderr).strip()[-200:]}")
        return {}
    parts[UNTRACKED] = rss_mib - parts.pop("tracked")
    return parts


_said: set[str] = set()


def _say_once(why: str) -> None:
    if why not in _said:
        _said.add(why)
        print(f"views JVM's parts not sampled: {why}", flush=True)


def views_parts(home: Path, *, native_memory: bool = False) -> dict[str, float]:
    """The views job's resident MiB split into its parts, to see which one grows: the Python driver
    (``jobs`` and its foreachBatch code), the Spark JVM, and the Python workers the JVM starts; with
    ``native_memory``, the JVM's own parts too (it must run with native memory tracking), named
    "views (JVM) <part>, committed" and "views (JVM) untracked, resident less committed"."""
    parts: dict[str, float] = {}
    with contextlib.suppress(psutil.Error, KeyError):  # the job may restart meanwhile
        driver = psutil.Process(Supervisor(home).pids()["views"])
        parts["views (Python driver)"] = driver.memory_info().rss / 2**20
        for child in members(driver)[1:]:
            with contextlib.suppress(psutil.Error):
                rss = child.memory_info().rss / 2**20
                jvm = child.name() == "java"
                name = "views (JVM)" if jvm else "views (Python workers)"
                parts[name] = parts.get(name, 0.0) + rss
                if jvm and native_memory:
                    parts |= {_part_name(part): mib for part, mib in by_part(child.pid, rss).items()}
    return parts


def _part_name(part: str) -> str:
    what = "resident less committed" if part == UNTRACKED else "committed"
    return f"views (JVM) {part}, {what}"


def native_memory_env(env: dict[str, str]) -> dict[str, str]:
    """The views job's JVM options, as the stack started with ``env`` reads them, plus native memory
    tracking, as an override for that stack."""
    with mock.patch.dict(os.environ, env):
        options = load_settings().spark.views_java_options
    return {"TALLY_SPARK__VIEWS_JAVA_OPTIONS": f"{options} {NMT_OPTION}".strip()}
