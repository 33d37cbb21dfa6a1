"""One-time setup of what pip cannot install: the Kafka broker jars and Spark's extra packages.

Both come from Maven Central through Maven (``ops/maven/*.xml``) into a project-local
folder, so later runs need no network. Every failure says what to do next.
"""

from __future__ import annotations

import hashlib
import logging
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from tally.jvm import JARS_DIR, RESOLVED_STAMP, SetupError, check_java
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
