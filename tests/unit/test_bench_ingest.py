import json

import pytest

import bench.ingest
from bench.ingest import beacon, beacon_json
from bench.loadgen import Run


@pytest.mark.parametrize("n", [0, 49, 123_456_789, 2_000_000_000 * 50 + 49, 2**48 - 1])
def test_the_benchmarks_formatted_beacons_are_the_beacons_it_means(n: int) -> None:
    assert json.loads(beacon_json(n)) == beacon(n)


def test_the_ramps_take_turns_at_every_rate_and_each_server_stops_at_its_own_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    capacity = {1: 4_500.0, 2: 1_800.0}  # port -> the highest rate it keeps up with
    steps: list[tuple[int, float]] = []
    warmups: set[float] = set()

    def fake_run(port: int, _make: object, *, rate: float, seconds: float, warmup_s: float = 0.0) -> Run:
        steps.append((port, rate))
        if rate in bench.ingest.RATES:
            warmups.add(warmup_s)
        ok = rate <= capacity[port]
        n = int(rate * seconds)
        return Run(rate, seconds, [1.0 if ok else 500.0] * n, errors=0, statuses={202: n})

    monkeypatch.setattr(bench.ingest, "run_open_loop", fake_run)
    peaks = bench.ingest.ramp({"a": 1, "b": 2}, lambda port, salt: lambda i: b"", 1.0, warmup_s=1.0, refine=3)
    # Each server's peak: its last rate sustained, refined between that and its first failure.
    assert peaks["a"] == 4_500  # 4000 kept up, 6000 not; then 5000 no, 4500 yes, 4750 no
    assert peaks["b"] == 1_750  # 1500 kept up, 2000 not; then 1750 yes, 1875 no, 1812 no
    ramp_steps = [s for s in steps[2:] if s[1] in bench.ingest.RATES]
    # While both climb, every rate is run on both, the order alternating from one rate to the next.
    assert ramp_steps[:6] == [(1, 250), (2, 250), (2, 500), (1, 500), (1, 1000), (2, 1000)]
    # b drops out at its first failure (2000/s); a goes on alone.
    assert (2, 3000) not in steps and (1, 3000) in steps and (1, 8000) not in steps
    # Every step (the first, 30 s warm-up at 500/s aside) begins with its own untimed second.
    assert warmups == {0.0, bench.ingest.STEP_WARMUP_S}


def test_a_step_missed_once_is_run_again_and_only_two_misses_in_a_row_end_the_ramp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    capacity = 4_500.0
    stalls = {1000}  # one stall of the shared machine, during the first run at 1000/s
    steps: list[float] = []

    def fake_run(_port: int, _make: object, *, rate: float, seconds: float, warmup_s: float = 0.0) -> Run:
        steps.append(rate)
        stalled = rate in stalls
        stalls.discard(rate)
        ok = rate <= capacity and not stalled
        n = int(rate * seconds)
        return Run(rate, seconds, [1.0 if ok else 500.0] * n, errors=0, statuses={202: n})

    monkeypatch.setattr(bench.ingest, "run_open_loop", fake_run)
    peaks = bench.ingest.ramp({"a": 1}, lambda port, salt: lambda i: b"", 1.0, warmup_s=1.0, refine=3)
    assert peaks["a"] == 4_500  # the stall at 1000/s did not end the climb
    assert steps.count(1000) == 2 and steps.count(2000) == 1  # run again once, at once
    assert steps.count(6000) == 2  # a real limit misses twice in a row
