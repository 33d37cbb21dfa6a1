"""One-time setup of what pip cannot install: the Kafka broker jars and Spark's extra packages.

Both come from Maven Central through Maven (``ops/maven/*.xml``) into a project-local
folder, so later runs need no network. Every failure says what to do next.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tally.jvm import CLASS_ARCHIVE_PREFIX, JARS_DIR, RESOLVED_STAMP, SetupError, check_java, spark_class_archive
from tally.jvm import spark_jars as jvm_spark_jars
from tally.log import kv

log = logging.getLogger("tally.setup")

MAVEN_DIR = Path(__file__).resolve().parent / "maven"


def _pom_digest(pom: Path) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()[:16]


def _copy_dependencies(pom: Path, out_dir: Path) -> None:
    mvn = shutil.which("mvn")
    if not mvn:
        raise SetupError(
            "Maven (mvn) is required to fetch the Kafka and Spark jars from Maven Central. "
            "Install it (Debian/Ubuntu: apt install maven)."
        )
    cmd = [
        mvn,
        "-q",
        "-B",
        "-s",
        str(MAVEN_DIR / "settings.xml"),
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={out_dir}",
        "-DincludeScope=runtime",
    ]
    log.info("maven resolving", extra=kv(pom=pom.name, into=str(out_dir)))
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        detail = "\n".join(line for line in done.stdout.splitlines() if "ERROR" in line)[:2000]
        hint = (
            "Maven Central looks unreachable: check the network or proxy (~/.m2/settings.xml)."
            if re.search(r"Unknown host|Could not transfer|Connection", detail)
            else "Read the Maven error above."
        )
        raise SetupError(f"Maven could not resolve {pom.name}:\n{detail}\n{hint}")


def _resolve(name: str) -> Path:
    """Resolve ``maven/<name>.xml`` into ``JARS_DIR/<name>`` unless already done for this pom."""
    pom = MAVEN_DIR / f"{name}.xml"
    target = JARS_DIR / name
    stamp = target / RESOLVED_STAMP
    if stamp.exists() and stamp.read_text() == _pom_digest(pom):
        return target
    JARS_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=JARS_DIR) as staging:
        _copy_dependencies(pom, Path(staging))
        fresh = Path(staging) / "out"
        fresh.mkdir()
        for jar in Path(staging).glob("*.jar"):
            jar.rename(fresh / jar.name)
        (fresh / RESOLVED_STAMP).write_text(_pom_digest(pom))
        if target.exists():
            shutil.rmtree(target)
        fresh.rename(target)  # all or nothing: a half-resolved folder never looks complete
    log.info("jars ready", extra=kv(name=name, jars=len(list(target.glob("*.jar")))))
    return target


def kafka_jars() -> Path:
    """Folder with the Kafka broker's classpath (resolved on first use)."""
    return _resolve("kafka-broker")


def spark_jars(*, object_store: bool = False) -> list[str]:
    """Resolve the Spark packages (and the s3a jars for ``object_store``); list them (``tally.jvm.spark_jars``)."""
    _resolve("spark-packages")
    if object_store:
        _resolve("spark-s3")
    return jvm_spark_jars(object_store=object_store)


def setup() -> None:
    """Check Java and Maven, then resolve every jar Tally needs."""
    major = check_java()
    log.info("java ok", extra=kv(version=major))
    kafka_jars()
    spark_jars(object_store=True)  # the s3a jars too (19 MB), so that moving the warehouse needs no network
    class_archive()


ARCHIVE_TIMEOUT_S = 900
ARCHIVES_KEPT = 3  # other JDKs' or jars' archives (other clones) kept beside the newest


def class_archive() -> Path | None:
    """The Spark driver JVM's class-data archive (``tally.jvm.spark_class_archive``), written once
    if missing; None if it is off or could not be written (Spark then starts without one, slower).

    Written by ``python -m jobs.class_archive`` in a temporary home, to a file of its own that is
    moved into place only when the JVM that wrote it has exited: a reader never maps half of one."""
    target = spark_class_archive()
    if target is None or target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
    print(
        f"setup: writing the Spark driver's class-data archive {target} (once per JDK and set of jars, about a minute)"
    )
    with tempfile.TemporaryDirectory(prefix="tally-setup-") as home:
        env = {**os.environ, "TALLY_HOME": home, "TALLY_SPARK__MASTER": "local[*]"}
        env.pop("TALLY_WAREHOUSE__PATH", None)
        try:
            done = subprocess.run(
                [sys.executable, "-m", "jobs.class_archive", str(partial)],
                env=env,
                capture_output=True,
                text=True,
                timeout=ARCHIVE_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            done = None
    if done is None or done.returncode != 0 or not partial.is_file():
        partial.unlink(missing_ok=True)
        tail = "timed out" if done is None else (done.stderr.strip().splitlines() or ["no output"])[-1]
        log.warning("no class-data archive: Spark starts without one", extra=kv(reason=tail[-300:]))
        return None
    os.replace(partial, target)
    older = sorted(
        (p for p in target.parent.glob(f"{CLASS_ARCHIVE_PREFIX}*.jsa") if p != target), key=lambda p: p.stat().st_mtime
    )
    for stale in older[: max(0, len(older) - ARCHIVES_KEPT)]:
        stale.unlink(missing_ok=True)
    log.info("class-data archive written", extra=kv(path=str(target), mib=target.stat().st_size >> 20))
    return target
