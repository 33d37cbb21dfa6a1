"""One-time setup of what pip cannot install: the Kafka broker jars and Spark's extra packages.

Both come from Maven Central through Maven (``tally/maven/*.xml``) into a project-local
folder, so later runs need no network. Every failure says what to do next.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from tally.log import kv
from tally.settings import PROJECT_ROOT

log = logging.getLogger("tally.setup")

MAVEN_DIR = Path(__file__).resolve().parent / "maven"
JARS_DIR = Path(os.environ.get("TALLY_JARS_DIR", PROJECT_ROOT / ".tally" / "jars"))
MIN_JAVA = 17


class SetupError(RuntimeError):
    """Setup cannot continue; the message says what the user should do."""


def java_binary() -> str:
    """The ``java`` to run: ``$JAVA_HOME/bin/java`` if set, else the one on PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise SetupError(
            f"Java {MIN_JAVA}+ is required (Kafka and Spark run on the JVM) and none was found. "
            "Install it (Debian/Ubuntu: apt install openjdk-17-jre-headless) or set JAVA_HOME."
        )
    return found


def check_java() -> int:
    """Return the Java major version, or raise SetupError if Java is missing or too old."""
    java = java_binary()
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        raise SetupError(f"could not read the Java version from `{java} -version`: {out.strip()!r}")
    major = int(match.group(1))
    if major == 1:  # "1.8.0_x" style
        major = int(match.group(2) or 0)
    if major < MIN_JAVA:
        raise SetupError(
            f"{java} is Java {major}; Kafka 4 and Spark 4 need Java {MIN_JAVA}+. "
            "Install a newer JDK and point JAVA_HOME at it."
        )
    return major


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


def _artifact_name(jar: str) -> str:
    """``jackson-core-2.13.5.jar`` -> ``jackson-core`` (the artifact without its version)."""
    return re.sub(r"-\d[^-]*(-\d+)?\.jar$", "", jar)


def _pyspark_jars() -> set[str]:
    import pyspark

    jars_dir = Path(pyspark.__file__).parent / "jars"
    return {_artifact_name(j.name) for j in jars_dir.glob("*.jar")}


def _resolve(name: str) -> Path:
    """Resolve ``maven/<name>.xml`` into ``JARS_DIR/<name>`` unless already done for this pom."""
    pom = MAVEN_DIR / f"{name}.xml"
    target = JARS_DIR / name
    stamp = target / ".resolved"
    if stamp.exists() and stamp.read_text() == _pom_digest(pom):
        return target
    JARS_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=JARS_DIR) as staging:
        _copy_dependencies(pom, Path(staging))
        fresh = Path(staging) / "out"
        fresh.mkdir()
        for jar in Path(staging).glob("*.jar"):
            jar.rename(fresh / jar.name)
        (fresh / ".resolved").write_text(_pom_digest(pom))
        if target.exists():
            shutil.rmtree(target)
        fresh.rename(target)  # all or nothing: a half-resolved folder never looks complete
    log.info("jars ready", extra=kv(name=name, jars=len(list(target.glob("*.jar")))))
    return target


def kafka_jars() -> Path:
    """Folder with the Kafka broker's classpath (resolved on first use)."""
    return _resolve("kafka-broker")


def spark_jars(*, object_store: bool = False) -> list[str]:
    """Jar paths for ``spark.jars``: Delta and spark-sql-kafka, minus what pyspark ships.

    Skipping artifacts pyspark already has (jackson, hadoop, parquet …) keeps two versions
    of one library off the classpath. ``object_store`` adds the s3a filesystem (hadoop-aws and
    the AWS SDK modules it needs) for an ``s3a://`` warehouse.
    """
    shipped = _pyspark_jars()
    folders = [_resolve("spark-packages"), *([_resolve("spark-s3")] if object_store else [])]
    return sorted(str(j) for folder in folders for j in folder.glob("*.jar") if _artifact_name(j.name) not in shipped)


def setup() -> None:
    """Check Java and Maven, then resolve every jar Tally needs."""
    major = check_java()
    log.info("java ok", extra=kv(version=major))
    kafka_jars()
    spark_jars(object_store=True)  # the s3a jars too (19 MB), so that moving the warehouse needs no network
