"""The views JVM's memory by part (bench.soak --native-memory): NMT's summary read into parts, from
a real JVM's jcmd and from text as JDK 17 prints it."""

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from bench.memory import NMT_OPTION, by_part, native_memory_env, parse_summary

# The head of `jcmd <pid> VM.native_memory summary` of the views JVM in a soak (JDK 17), malloc lines kept.
SUMMARY = """
Native Memory Tracking:

(Omitting categories weighting less than 1KB)

Total: reserved=2636197KB, committed=685113KB
       malloc: 81009KB #1016398
       mmap:   reserved=2555188KB, committed=604104KB

-                 Java Heap (reserved=1048576KB, committed=387136KB)
                            (mmap: reserved=1048576KB, committed=387136KB)

-                     Class (reserved=1051644KB, committed=24636KB)
                            (classes #28041)
                            (mmap: reserved=1048576KB, committed=21568KB)

-                    Thread (reserved=76686KB, committed=8882KB)
                            (thread #74)
                            (stack: reserved=76456KB, committed=8652KB)

-                      Code (reserved=167392KB, committed=33944KB)
                            (mmap: reserved=165120KB, committed=31672KB)

-                        GC (reserved=3443KB, committed=1299KB)
-                  Compiler (reserved=1668KB, committed=1668KB)
-                  Internal (reserved=724KB, committed=720KB)
-                     Other (reserved=12042KB, committed=12042KB)
-                    Symbol (reserved=38485KB, committed=38485KB)
-    Native Memory Tracking (reserved=13412KB, committed=13412KB)
-        Shared class space (reserved=16384KB, committed=12060KB)
-               Arena Chunk (reserved=6657KB, committed=6657KB)
-                   Tracing (reserved=32KB, committed=32KB)
-                    Module (reserved=814KB, committed=814KB)
-                 Safepoint (reserved=8KB, committed=8KB)
-           Synchronization (reserved=242KB, committed=242KB)
-            Serviceability (reserved=1KB, committed=1KB)
-                 Metaspace (reserved=197634KB, committed=142722KB)
                            (mmap: reserved=196608KB, committed=141696KB)
-      String Deduplication (reserved=1KB, committed=1KB)
-           Object Monitors (reserved=353KB, committed=353KB)
"""


def test_the_summary_is_split_into_the_parts_that_can_grow_and_they_add_up_to_the_total() -> None:
    parts = parse_summary(SUMMARY)
    assert parts is not None
    assert parts["heap"] == pytest.approx(387136 / 1024)
    assert parts["class metadata"] == pytest.approx((24636 + 142722) / 1024), "class space and metaspace together"
    assert parts["code cache"] == pytest.approx(33944 / 1024)
    assert parts["threads"] == pytest.approx(8882 / 1024)
    assert parts["tracked"] == pytest.approx(685113 / 1024)
    others = sum(v for k, v in parts.items() if k != "tracked")
    assert others == pytest.approx(parts["tracked"], abs=0.01), "every category lands in one part"


def test_a_jvm_without_tracking_has_no_summary() -> None:
    assert parse_summary("17337:\nNative memory tracking is not enabled\n") is None


def _java() -> str:
    java = shutil.which("java")
    if java is None or shutil.which("jcmd") is None:
        pytest.skip("a JDK (java, jcmd) is not installed: make setup installs one")
    return java


@pytest.fixture
def sleeping_jvm(tmp_path: Path) -> Iterator[tuple[list[str], Path]]:
    source = tmp_path / "Sleep.java"
    source.write_text(
        "public class Sleep { public static void main(String[] a) throws Exception { Thread.sleep(60000); } }"
    )
    yield [_java(), "-Xmx64m"], source


def _started(command: list[str]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # the source launcher compiles first; jcmd answers once the VM is up
        if proc.poll() is not None:
            raise AssertionError(f"the JVM exited ({proc.returncode}) before it answered jcmd")
        if subprocess.run(["jcmd", str(proc.pid), "VM.uptime"], capture_output=True).returncode == 0:
            return proc
        time.sleep(0.5)
    proc.kill()
    proc.wait()
    raise AssertionError("the JVM did not answer jcmd within two minutes")


def _summary(pid: int) -> str:
    return subprocess.run(["jcmd", str(pid), "VM.native_memory", "summary"], capture_output=True, text=True).stdout


def test_a_tracked_jvm_is_split_into_parts_that_add_up_to_its_total_and_the_rest_of_its_resident_size(
    sleeping_jvm: tuple[list[str], Path],
) -> None:
    java, source = sleeping_jvm
    proc = _started([*java, NMT_OPTION, str(source)])
    try:
        summary = parse_summary(_summary(proc.pid))
        rss = psutil.Process(proc.pid).memory_info().rss / 2**20
        parts = by_part(proc.pid, rss)
    finally:
        proc.kill()
        proc.wait()
    assert summary is not None
    categories = sum(v for k, v in summary.items() if k != "tracked")
    assert categories == pytest.approx(summary["tracked"], abs=40 / 1024), "NMT rounds each category to 1 KiB"
    assert set(parts) == {"heap", "class metadata", "code cache", "threads", "other tracked", "untracked"}
    assert parts["heap"] > 0 and parts["class metadata"] > 0 and parts["code cache"] > 0 and parts["threads"] > 0
    # Asked a moment apart, so not equal to the figure: the untracked part is the resident size less the total.
    assert parts["untracked"] == pytest.approx(rss - summary["tracked"], abs=8.0)


def test_a_jvm_without_tracking_gives_no_parts(sleeping_jvm: tuple[list[str], Path]) -> None:
    java, source = sleeping_jvm
    proc = _started([*java, str(source)])
    try:
        answer = _summary(proc.pid)
        parts = by_part(proc.pid, 100.0)
    finally:
        proc.kill()
        proc.wait()
    assert "not enabled" in answer, "jcmd itself answered: the JVM runs without tracking"
    assert parts == {}


def test_tracking_is_added_to_the_views_options_the_soaks_stack_reads_not_the_shells(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TALLY_ENV", "no-such-env")  # the shell's; the soak's stack runs with TALLY_ENV=""
    stack = {"TALLY_ENV": "", "TALLY_SPARK__VIEWS_JAVA_OPTIONS": "-XX:+UseSerialGC"}
    assert native_memory_env(stack) == {"TALLY_SPARK__VIEWS_JAVA_OPTIONS": f"-XX:+UseSerialGC {NMT_OPTION}"}
    configured = native_memory_env({"TALLY_ENV": ""})["TALLY_SPARK__VIEWS_JAVA_OPTIONS"]
    assert configured.startswith("-XX:+UseSerialGC") and configured.endswith(NMT_OPTION), "conf/tally.yaml's options"
    assert os.environ["TALLY_ENV"] == "no-such-env", "the shell's environment is left as it was"
