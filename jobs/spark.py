"""The one SparkSession factory: master from config, Delta and the Kafka source on the classpath."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from tally.jvm import check_java, spark_class_archive, spark_jars
from tally.settings import Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def s3a_config(settings: Settings) -> dict[str, str]:
    """Hadoop S3A settings (``spark.hadoop.fs.s3a.*``) for an ``s3a://`` warehouse; empty otherwise.

    Delta's default log store for s3a (S3SingleDriverLogStore) is safe while each table has one
    Spark writer at a time, which is how Tally runs: the streaming job or a backfill writes
    ``agg.*``; delta-rs writes ``raw.*`` and ``quality.*``. Credentials left empty fall through to
    S3A's default chain (AWS_* variables, profiles, instance roles). Spark redacts ``*secret*``
    keys in its UI and logs.
    """
    w = settings.warehouse
    if not w.on_object_store:
        return {}
    prefix = "spark.hadoop.fs.s3a."
    conf = {
        prefix + "path.style.access": str(w.path_style_access).lower(),
        prefix + "endpoint.region": w.region or "us-east-1",
    }
    if w.endpoint:
        conf[prefix + "endpoint"] = w.endpoint
        conf[prefix + "connection.ssl.enabled"] = str(not w.endpoint.startswith("http://")).lower()
    if w.access_key_id:
        conf[prefix + "access.key"] = w.access_key_id
        conf[prefix + "secret.key"] = w.secret_access_key
        conf[prefix + "aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
    return conf


def local_cores(master: str) -> int | None:
    """The cores of a local master (``local``, ``local[N]``, ``local[*]``, ``local[N, F]``); None for a cluster."""
    found = re.fullmatch(r"local(?:\[(\*|\d+)(?:,\s*\d+)?\])?", master.strip())
    if found is None:
        return None
    cores = found.group(1)
    if cores is None:
        return 1
    # Like Spark's local[*]: the cores this process may run on (a container's share, not the host's).
    return len(os.sched_getaffinity(0)) if cores == "*" else int(cores)


# ``spark.driver_memory: auto``: a quarter of the machine's memory (a JVM's own default maximum
# heap), at least 1 GiB and at most 8 GiB.
AUTO_HEAP_SHARE = 4
AUTO_HEAP_MIB = (1024, 8192)


def machine_memory() -> int:
    """Bytes of memory this process may use: the machine's, or where lower the limit of its cgroup
    or of a cgroup above it (a container's, a systemd service's ``MemoryMax``)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return min([total, *cgroup_memory_limits()])


def cgroup_memory_limits(proc: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")) -> list[int]:
    """The memory limits (bytes) of this process's cgroup and those above it: cgroup v2 (``memory.max``),
    or v1's memory controller (``memory.limit_in_bytes``). None found: an empty list."""
    try:
        lines = proc.read_text().splitlines()
    except OSError:
        return []
    limits = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            name, base = "memory.max", root
        elif "memory" in controllers.split(","):
            name, base = "memory.limit_in_bytes", root / "memory"
        else:
            continue
        group = base / path.lstrip("/")
        for folder in (group, *group.parents):
            try:
                text = (folder / name).read_text().strip()
            except OSError:
                text = ""
            if text.isdigit():  # "max": no limit
                limits.append(int(text))
            if folder == base:
                break
    return limits


def batch_driver_memory(settings: Settings, *, memory: int | None = None) -> str:
    """The batch jobs' driver heap: ``spark.driver_memory``, or for ``auto`` a quarter of ``memory``
    (the machine's, by default) within ``AUTO_HEAP_MIB``. On a local master the driver runs the
    tasks, so its heap bounds the events a backfill job holds (``jobs.backfill_chunks.chunk_events``)."""
    configured = settings.spark.driver_memory
    if configured != "auto":
        return configured
    mib = (machine_memory() if memory is None else memory) // AUTO_HEAP_SHARE // 2**20
    low, high = AUTO_HEAP_MIB
    return f"{min(high, max(low, mib))}m"


def shuffle_partitions(settings: Settings) -> int | None:
    """``spark.shuffle_partitions``, or with 0 one per core of a local master (None: Spark's default).

    On ``local[2]`` a streaming micro-batch with 4 shuffle partitions ran 4 tasks per stage, each
    with its own state store files and output file, for a few hundred rows: beacon -> view p95
    was 14-16 s against 11-13 s with 2, in alternating runs of ``bench.views``.
    """
    s = settings.spark
    return s.shuffle_partitions if s.shuffle_partitions > 0 else local_cores(s.master)


ARCHIVE_OPTIONS = ("-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit")


def driver_java_options(local_dir: Path, job_options: str, archive: Path | None = None) -> str:
    """The driver JVM's options: the factory's own (Derby's home in the local dir; the class-data
    archive ``archive`` if it exists, unless the job names an archive itself), then a job's own.

    A JVM that cannot map the archive (another JDK, a damaged file) starts without it: the JVM's
    default ``-Xshare:auto``."""
    own = [f"-Dderby.system.home={local_dir}"]
    if archive is not None and archive.is_file() and not any(a in job_options for a in ARCHIVE_OPTIONS):
        own.append(f"-XX:SharedArchiveFile={archive}")
    return " ".join(option for option in (*own, job_options.strip()) if option)


def spark_session(settings: Settings, app_name: str, *, extra: Mapping[str, str] | None = None) -> SparkSession:
    """Build (or return the running) SparkSession for a Tally job.

    Small-machine defaults: the UI off, few shuffle partitions, Delta snapshot state in few
    partitions. ``spark.master`` comes from config, so the same job runs on ``local[*]`` or a
    cluster without code changes. ``extra`` adds Spark settings of one job's own; its
    ``spark.driver.extraJavaOptions`` are added to the factory's own, not put in their place, and
    take the place of the batch jobs' ``spark.java_options``.
    """
    from pyspark.sql import SparkSession

    check_java()
    # Workers must run the same Python as the driver (the project's venv).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # glibc gives each thread that allocates its own 64 MiB malloc arena, up to 8 per core; the JVM's
    # hundreds of threads then hold memory nobody uses. Two arenas (Hadoop's scripts cap them at 4).
    os.environ.setdefault("MALLOC_ARENA_MAX", "2")
    s = settings.spark
    # Loopback unless told otherwise: executors on other machines need the driver at an address
    # they can reach, given by Spark's own SPARK_LOCAL_IP (see docs/DEPLOYMENT.md).
    driver_host = os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")
    local_dir = settings.home_dir / "spark" / "tmp"
    local_dir.mkdir(parents=True, exist_ok=True)
    builder = (
        SparkSession.builder.appName(app_name)
        .master(s.master)
        .config("spark.driver.memory", batch_driver_memory(settings))
        .config("spark.driver.host", driver_host)
        .config("spark.driver.bindAddress", driver_host)
        .config("spark.jars", ",".join(spark_jars(object_store=settings.warehouse.on_object_store)))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.local.dir", str(local_dir))
        .config("spark.sql.warehouse.dir", str(settings.home_dir / "spark" / "sql-warehouse"))
    )
    own = dict(extra or {})
    job_options = own.pop("spark.driver.extraJavaOptions", s.java_options)
    java_options = driver_java_options(local_dir, job_options, spark_class_archive())
    builder = builder.config("spark.driver.extraJavaOptions", java_options)
    partitions = shuffle_partitions(settings)
    if partitions is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(partitions))
        builder = builder.config("spark.databricks.delta.snapshotPartitions", str(partitions))
    for key, value in {**s3a_config(settings), **own}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
