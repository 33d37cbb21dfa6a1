"""The Spark driver's class-data archive: named by the JDK and jars it is valid for, mapped by a
driver JVM only when it exists and the job does not name an archive itself, written whole or not
at all by setup."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from jobs.spark import driver_java_options
from ops import bootstrap
from tally import jvm


def fake_jdk(root: Path) -> Path:
    java = root / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    (root / "jdk" / "lib").mkdir()
    (root / "jdk" / "lib" / "modules").write_bytes(b"m" * 10)
    return java


def test_the_archives_name_changes_with_the_jdk_or_any_jar(tmp_path: Path) -> None:
    java, jars = fake_jdk(tmp_path), tmp_path / "jars"
    jars.mkdir()
    (jars / "spark-core_2.13-4.0.1.jar").write_bytes(b"x" * 100)
    key = jvm.class_archive_key(java, [jars])
    assert key == jvm.class_archive_key(java, [jars]), "the same JDK and jars: the same archive"
    (jars / "delta-spark_2.13-4.0.0.jar").write_bytes(b"y" * 5)
    with_delta = jvm.class_archive_key(java, [jars])
    assert with_delta != key, "a jar added"
    (jars / "delta-spark_2.13-4.0.0.jar").write_bytes(b"y" * 6)
    assert jvm.class_archive_key(java, [jars]) != with_delta, "a jar of another size (another version)"
    (tmp_path / "jdk" / "lib" / "modules").write_bytes(b"m" * 11)
    assert jvm.class_archive_key(java, [jars]) not in (key, with_delta), "another JDK image"


def test_no_archive_when_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(jvm.CLASS_ARCHIVE_ENV, "off")
    assert jvm.spark_class_archive() is None


def test_a_driver_maps_the_archive_only_if_it_exists_and_the_job_names_none(tmp_path: Path) -> None:
    archive = tmp_path / "spark-driver-0123.jsa"
    derby = f"-Dderby.system.home={tmp_path}"
    assert driver_java_options(tmp_path, "-XX:+UseSerialGC", archive) == f"{derby} -XX:+UseSerialGC", "none yet"
    archive.write_bytes(b"cds")
    mapped = driver_java_options(tmp_path, "-XX:+UseSerialGC", archive)
    assert mapped == f"{derby} -XX:SharedArchiveFile={archive} -XX:+UseSerialGC"
    writing = driver_java_options(tmp_path, "-XX:ArchiveClassesAtExit=/tmp/new.jsa", archive)
    assert "SharedArchiveFile" not in writing, "a JVM writing an archive maps none"


def test_setup_moves_an_archive_into_place_only_when_its_writer_succeeded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "archives" / f"{jvm.CLASS_ARCHIVE_PREFIX}new.jsa"
    monkeypatch.setattr(bootstrap, "spark_class_archive", lambda: target)
    outcomes: list[int] = [1, 0]

    def writer(command: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        code = outcomes.pop(0)
        Path(command[-1]).write_bytes(b"half" if code else b"whole")  # a failed writer may leave part of one
        return subprocess.CompletedProcess(command, code, "", "the JVM died" if code else "")

    monkeypatch.setattr(subprocess, "run", writer)
    assert bootstrap.class_archive() is None and not target.exists(), "a failed writer: no archive"
    assert list(target.parent.iterdir()) == [], "and no partial file left"
    stale = [target.parent / f"{jvm.CLASS_ARCHIVE_PREFIX}old{n}.jsa" for n in range(5)]
    for n, path in enumerate(stale):
        path.write_bytes(b"old")
        os.utime(path, (n, n))
    assert bootstrap.class_archive() == target and target.read_bytes() == b"whole"
    left = sorted(p.name for p in target.parent.iterdir())
    assert left == sorted([target.name, *(p.name for p in stale[-bootstrap.ARCHIVES_KEPT :])]), "the oldest removed"
    assert bootstrap.class_archive() == target and outcomes == [], "present: not written again"
