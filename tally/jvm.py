"""The JVM Tally runs on, and where ``tally setup`` puts the jars it resolves from Maven Central.

Words only: which ``java`` to run, the minimum version, the jar folders and how to read them.
Resolving the jars (running Maven) is :mod:`ops.bootstrap`'s job; readers such as the Spark
session factory only list what setup left, and say to run ``tally setup`` when it is missing.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

from tally.settings import PROJECT_ROOT

JARS_DIR = Path(os.environ.get("TALLY_JARS_DIR", PROJECT_ROOT / ".tally" / "jars"))
MIN_JAVA = 17
RESOLVED_STAMP = ".resolved"  # written last into a jar folder, with the digest of the pom it came from


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


def artifact_name(jar: str) -> str:
    """``jackson-core-2.13.5.jar`` -> ``jackson-core`` (the artifact without its version)."""
    return re.sub(r"-\d[^-]*(-\d+)?\.jar$", "", jar)


def resolved_folder(name: str) -> Path:
    """``JARS_DIR/<name>`` once ``tally setup`` has resolved it completely, else SetupError."""
    folder = JARS_DIR / name
    if not (folder / RESOLVED_STAMP).exists():
        raise SetupError(f"the {name} jars are not in {folder} yet: run `tally setup` (or `make setup`) first")
    return folder


def pyspark_jar_names() -> set[str]:
    """The artifacts pyspark ships in its own ``jars/`` folder (found without importing pyspark)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        return set()
    return {artifact_name(j.name) for j in (Path(spec.origin).parent / "jars").glob("*.jar")}


def spark_jars(*, object_store: bool = False) -> list[str]:
    """Jar paths for ``spark.jars``: Delta and spark-sql-kafka, minus what pyspark ships.

    Skipping artifacts pyspark already has (jackson, hadoop, parquet …) keeps two versions
    of one library off the classpath. ``object_store`` adds the s3a filesystem (hadoop-aws and
    the AWS SDK modules it needs) for an ``s3a://`` warehouse.
    """
    shipped = pyspark_jar_names()
    folders = [resolved_folder("spark-packages"), *([resolved_folder("spark-s3")] if object_store else [])]
    return sorted(str(j) for folder in folders for j in folder.glob("*.jar") if artifact_name(j.name) not in shipped)


# The class-data archive of Spark's driver JVM (JDK CDS, JEP 350): the classes a Spark job loads,
# parsed and verified once by `tally setup` and mapped by every later driver JVM instead of loaded
# from the jars again. A Spark session and a small Delta job took 23.0 s with it against 32.0 s
# without (medians of 6 processes each, bench.jvm_start). One per JDK and set of jars (its name is
# their digest), kept beside uv's download in the user's cache, so a fresh clone or a new
# TALLY_HOME reuses it.
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tally"
CLASS_ARCHIVES = CACHE_DIR / "class-archives"
CLASS_ARCHIVE_PREFIX = "spark-driver-"
CLASS_ARCHIVE_ENV = "TALLY_CLASS_ARCHIVE"  # "off": never use one (bench.jvm_start's baseline)


def class_archive_key(java: Path, jar_folders: list[Path]) -> str:
    """The digest an archive is valid for: the JDK (its ``java`` and module image, by path, size and
    time) and every jar of the folders (by name and size); any change names a new archive."""
    parts = []
    home = java.resolve().parent.parent
    for path in (java.resolve(), home / "lib" / "modules"):
        if path.exists():
            stat = path.stat()
            parts.append(f"{path}:{stat.st_size}:{stat.st_mtime_ns}")
    for folder in jar_folders:
        parts += sorted(f"{j.name}:{j.stat().st_size}" for j in folder.glob("*.jar"))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def spark_class_archive() -> Path | None:
    """Where the driver JVM's class-data archive is for this JDK and these jars (present or not);
    None when ``TALLY_CLASS_ARCHIVE=off`` or pyspark is not installed."""
    if os.environ.get(CLASS_ARCHIVE_ENV) == "off":
        return None
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        return None
    folders = [Path(spec.origin).parent / "jars", *(p for p in (JARS_DIR / "spark-packages",) if p.is_dir())]
    return CLASS_ARCHIVES / f"{CLASS_ARCHIVE_PREFIX}{class_archive_key(Path(java_binary()), folders)}.jsa"
