"""The soak's figures: probes count from the first one the view showed, never before; what a service's
resident size adds up."""

import math
import os
import subprocess
import sys
import time

import psutil
import pyarrow as pa
import pytest

from bench.loadgen import run_open_loop
from bench.memory import memory_verdict, slope_mib_per_hour
from bench.soak import _figures, _view_latency, beacons, in_second_half, latency_by_minute, load_client, probe_paths
from bench.stack import is_jvm_fork, members


def test_probes_sent_before_the_view_first_showed_one_are_left_out_as_start_up() -> None:
    # Probe a waited out the job's start-up; b..e were sent once the view was running.
    sent = {"a": 0.0, "b": 43.0, "c": 45.0, "d": 50.0, "e": 55.0}
    seen = {"a": 42.0, "b": 47.0, "c": 51.0, "d": 60.0}  # e never showed
    figures = {f.name: f for f in _view_latency(sent, seen)}
    p50 = figures["views: beacon -> agg.traffic_1m p50 during the soak"]
    p95 = figures["views: beacon -> agg.traffic_1m p95 during the soak"]
    assert p50.value == 6.0  # lags 4, 6, 10: a's 42 s is not among them
    assert p95.value == 6.0  # int(0.95 * 2) = 1: the second of three, as the ingest p99 is taken
    assert figures["views: beacon -> agg.traffic_1m max during the soak"].value == 10.0
    assert "3/4 probes seen" in p95.note, "the probe sent after warm-up but never seen is counted as sent"
    assert p95.goal == "≤ 15 s"


def test_the_second_half_of_the_soak_has_a_p95_of_its_own() -> None:
    sent = {"a": 0.0, "b": 10.0, "c": 20.0, "d": 60.0, "e": 70.0, "f": 80.0}
    seen = {"a": 5.0, "b": 40.0, "c": 50.0, "d": 64.0, "e": 76.0}  # f never showed
    figures = {f.name: f for f in _view_latency(sent, seen, second_half=60.0)}
    late = figures["views: beacon -> agg.traffic_1m p95, second half of the soak"]
    assert late.value == 4.0  # lags 4 and 6: int(0.95 * 1) = 0
    assert late.note == "2/3 probes sent in the second half seen"
    # a was sent before the first probe was seen: the lags are 30, 30, 4 and 6
    assert figures["views: beacon -> agg.traffic_1m p95 during the soak"].value == 30.0
    assert "views: beacon -> agg.traffic_1m p95, second half of the soak" not in {
        f.name for f in _view_latency(sent, seen)
    }


def test_no_probe_seen_gives_an_unmeasured_figure_not_a_zero() -> None:
    (figure,) = _view_latency({"a": 1.0}, {})
    assert math.isnan(figure.value)
    assert figure.note.startswith("0/0 probes seen")


def test_the_slope_is_least_squares_over_the_second_half_in_mib_per_hour() -> None:
    seconds = [float(s) for s in range(0, 600, 10)]
    mib = [100.0 + (0.0 if s < 300 else (s - 300) / 3600 * 50) for s in seconds]  # 50 MiB/h after warm-up
    assert abs(slope_mib_per_hour(seconds, mib) - 50.0) < 1e-6


def test_a_part_sampled_too_rarely_for_a_slope_says_so_rather_than_shrinking() -> None:
    # The views JVM's parts are sampled once a minute: a 3-minute soak has one in its second half.
    assert math.isnan(slope_mib_per_hour([60.0, 120.0], [100.0, 200.0]))
    assert memory_verdict(float("nan"), 200.0) == "too few samples in the second half for a slope"
    assert memory_verdict(9.0, 100.0) == "flat", "under 10 MiB/h is flat whatever the size"
    assert memory_verdict(90.0, 2000.0) == "flat", "under 5% of 2,000 MiB an hour"
    assert memory_verdict(110.0, 2000.0) == "growing"
    assert memory_verdict(-110.0, 2000.0) == "shrinking"


def test_the_views_latency_is_also_shown_per_minute_of_the_soak_by_when_each_probe_was_sent() -> None:
    started = 100.0
    sent = {"a": 110.0, "b": 130.0, "c": 150.0, "d": 170.0, "e": 175.0}  # a-c in minute 1; d, e in minute 2
    seen = {"a": 120.0, "b": 136.0, "c": 158.0, "d": 200.0}  # e never showed
    assert latency_by_minute(sent, seen, started) == [
        "  views latency, minute 1: p50 8.0 s, p95 8.0 s, of 3 seen",  # lags 6, 8, 10, taken as the totals
        "  views latency, minute 2: p50 30.0 s, p95 30.0 s, of 1 seen",
    ]


@pytest.mark.parametrize(
    ("exe", "parent_exe", "fork"),
    [
        pytest.param("/usr/lib/jvm/bin/java", "/usr/lib/jvm/bin/java", True, id="a-jvm-fork-before-its-command"),
        pytest.param("/usr/lib/jvm/lib/jspawnhelper", "/usr/lib/jvm/bin/java", False, id="the-command-it-ran"),
        pytest.param("/venv/bin/python", "/venv/bin/python", False, id="a-python-worker-forked-by-its-daemon"),
        pytest.param("/usr/lib/jvm/bin/java", None, False, id="a-jvm-whose-parent-is-gone"),
    ],
)
def test_only_a_jvms_fork_that_has_not_run_its_command_is_left_out(
    exe: str, parent_exe: str | None, fork: bool
) -> None:
    assert is_jvm_fork(exe, parent_exe) is fork


def test_a_services_forked_python_children_count_in_its_resident_size() -> None:
    # As Spark's Python daemon forks its workers: the same executable as the parent, each one counted.
    code = "import os, time\nif os.fork() == 0:\n    time.sleep(30)\nelse:\n    time.sleep(30)"
    parent = subprocess.Popen([sys.executable, "-c", code])
    try:
        proc = psutil.Process(parent.pid)
        deadline = time.monotonic() + 10
        while not proc.children() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [m.pid for m in members(proc)] == [parent.pid, proc.children()[0].pid]
    finally:
        for child in psutil.Process(parent.pid).children():
            child.kill()
        parent.kill()
        parent.wait()


def test_the_soaks_load_generator_sends_its_beacons_from_a_process_of_its_own(slow_server: int) -> None:
    # Not in the bench's process: the samplers and the probes' watcher would hold its GIL.
    with load_client() as client:
        pid = client.submit(os.getpid).result()
        run = client.submit(run_open_loop, slow_server, beacons(slow_server, 0), rate=50, seconds=0.4).result()
    assert pid != os.getpid()
    assert run.statuses == {202: 20} and run.errors == 0
    assert min(run.latencies_ms) >= 50, "each answer came after the server's delay"


def test_the_watcher_picks_out_the_probes_pages_only() -> None:
    rows = pa.table(
        {
            "dimension": ["page", "page", "referrer", "page", "country", "page", None],
            "value": ["/probe/abc", "/soak/3", "/probe/not-a-page", "/probe/def", None, None, "/probe/ghi"],
        }
    )
    assert probe_paths(rows) == ["/probe/abc", "/probe/def"]


def test_ingests_p99_is_given_over_the_whole_soak_and_over_its_second_half_apart() -> None:
    warm_up = [float(ms) for ms in range(1, 101)]  # 1..100 ms while the views job starts
    later = [5.0] * 100
    figures = {f.name: f for f in _figures([], 500.0, "given", (warm_up + later, later), 0, 200, [], 0)}
    assert figures["ingest p99 over the soak"].value == 98.0
    assert figures["ingest p99 over the soak"].goal == "≤ 25 ms", "the goal is judged on the whole soak"
    assert figures["ingest p99, second half of the soak"].value == 5.0


def test_a_segment_counts_in_the_second_half_from_the_half_of_the_soak_on() -> None:
    assert not in_second_half(1799.9, 60.0)
    assert in_second_half(1800.0, 60.0) and in_second_half(3590.0, 60.0)
    assert in_second_half(900.0, 30.0) and not in_second_half(899.0, 30.0)
