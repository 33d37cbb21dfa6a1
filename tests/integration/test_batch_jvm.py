"""The batch jobs' JVM (backfill, `tally sql`) collects with the parallel collector
(``spark.java_options``); a job with JVM options of its own (the views job) has those instead.
Both map the class-data archive `tally setup` wrote (``make test`` runs setup first)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ops.stack import stack_env
from tally.jvm import spark_class_archive
from tally.settings import load_settings

SCRIPT = """
import json, sys
from jobs.spark import spark_session
from jobs.streaming import views_spark_config
from tally.settings import load_settings
settings = load_settings()
extra = views_spark_config(settings) if sys.argv[1] == "views" else None
spark = spark_session(settings, "tally-test-jvm", extra=extra)
beans = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
print(json.dumps(sorted(bean.getName() for bean in beans)))
spark.stop()
"""


def collectors(home: Path, job: str, *, java_options: str | None = None) -> list[str]:
    env = {**os.environ, **stack_env(home), "TALLY_ENV": "test"}
    if java_options is not None:
        env["TALLY_SPARK__JAVA_OPTIONS"] = java_options
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, job], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_a_batch_jobs_jvm_uses_the_parallel_collector_and_the_views_job_its_own(tmp_path: Path) -> None:
    assert collectors(tmp_path, "batch") == ["PS MarkSweep", "PS Scavenge"]
    assert collectors(tmp_path, "views") == ["Copy", "MarkSweepCompact"]  # views_java_options: the serial collector


def test_a_drivers_jvm_maps_the_class_data_archive_setup_wrote(tmp_path: Path) -> None:
    archive = spark_class_archive()
    assert archive is not None and archive.is_file(), f"tally setup (run by make test) writes {archive}"
    log = tmp_path / "cds.log"
    configured = load_settings().spark.java_options  # conf/test.yaml's, with its C1-only JIT
    collectors(tmp_path / "home", "batch", java_options=f"{configured} -Xlog:cds=info:file={log}")
    text = log.read_text()
    assert f"Opened archive {archive}" in text and "Mapped dynamic region" in text, text[-2000:]
