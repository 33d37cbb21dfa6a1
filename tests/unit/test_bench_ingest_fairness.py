"""bench.ingest compares like with like: the bare endpoint runs as ingest runs, and a step that
ingest answered from its spool (not Kafka) fails the run."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import bench.ingest
from bench.bare_app import SERVER_OPTIONS
from bench.ingest import SpooledAccepts, SpoolWatch, pause_and_check, spooled_events
from bench.loadgen import Run

METRICS = """\
# HELP tally_ingest_stored_total Accepted events by where they were made durable
# TYPE tally_ingest_stored_total counter
tally_ingest_stored_total{{store="kafka"}} {kafka}
tally_ingest_stored_total{{store="spool"}} {spool}
# HELP tally_ingest_events_total Events by outcome (accepted, or the rejection kind)
# TYPE tally_ingest_events_total counter
tally_ingest_events_total{{outcome="accepted"}} 12.0
"""


def ingest_uvicorn_options() -> dict[str, object]:
    """The keyword arguments ``python -m ingest`` passes to uvicorn.run, read from its source."""
    tree = ast.parse((Path(bench.ingest.__file__).parents[1] / "ingest" / "__main__.py").read_text())
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and ast.unparse(node.func) == "uvicorn.run"]
    assert len(calls) == 1, "ingest/__main__.py runs uvicorn.run once"
    return {k.arg: ast.unparse(k.value) for k in calls[0].keywords if k.arg}


def test_the_bare_endpoint_gets_every_uvicorn_option_ingest_sets() -> None:
    options = ingest_uvicorn_options()
    # The app, where it listens and how many workers are the run's own; every other option is shared.
    own = {"factory", "host", "port", "workers"}
    assert {k: options[k] for k in options.keys() - own} == {k: repr(v) for k, v in SERVER_OPTIONS.items()}
    assert "proxy_headers" in SERVER_OPTIONS and SERVER_OPTIONS["proxy_headers"] is False


def test_the_spool_counter_is_read_from_ingests_metrics() -> None:
    assert spooled_events(METRICS.format(kafka=100.0, spool=0.0)) == 0
    assert spooled_events(METRICS.format(kafka=100.0, spool=7.0)) == 7
    assert spooled_events("# nothing counted yet\n") == 0


def test_a_step_answered_from_the_spool_fails_the_run_and_one_answered_by_kafka_does_not() -> None:
    counts = iter([3.0, 3.0, 5.0])  # spooled before the ramp (e.g. at start-up), after step 1, after step 2
    watch = SpoolWatch(lambda: METRICS.format(kafka=1000.0, spool=next(counts)))
    watch.check("ingest ramp at 250/s")  # the start-up's 3 are not this step's
    with pytest.raises(SpooledAccepts, match="2 events of ingest ramp at 500/s"):
        watch.check("ingest ramp at 500/s")


def test_every_step_of_both_servers_is_followed_by_the_same_pause_and_only_ingest_is_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def fake_run(port: int, _make: object, *, rate: float, seconds: float, warmup_s: float = 0.0) -> Run:
        n = int(rate * seconds)
        return Run(rate, seconds, [1.0 if rate <= 1_000 else 500.0] * n, errors=0, statuses={202: n})

    pauses: list[str] = []
    checked: list[str] = []
    monkeypatch.setattr(bench.ingest, "run_open_loop", fake_run)
    monkeypatch.setattr("bench.ingest.time.sleep", lambda s: pauses.append(f"{s}"))
    after = pause_and_check({"ingest": checked.append}, pause_s=1.5)
    bench.ingest.ramp(
        {"bare": 1, "ingest": 2}, lambda p, s: lambda i: b"", 1.0, warmup_s=0.1, refine=0, after_step=after
    )
    # 250, 500, 1000 sustained; 1500 missed twice: 4 rates, 5 steps per server.
    assert len(pauses) == 10 and set(pauses) == {"1.5"}
    assert len(checked) == 5 and all(c.startswith("ingest ramp") for c in checked)
    assert "ingest ramp again at 1,500/s" in checked


def test_a_spooled_step_ends_the_ramp_with_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_run(port: int, _make: object, *, rate: float, seconds: float, warmup_s: float = 0.0) -> Run:
        n = int(rate * seconds)
        return Run(rate, seconds, [1.0] * n, errors=0, statuses={202: n})

    counts = iter([0.0, 0.0, 40.0])
    watch = SpoolWatch(lambda: METRICS.format(kafka=0.0, spool=next(counts)))
    monkeypatch.setattr(bench.ingest, "run_open_loop", fake_run)
    after = pause_and_check({"ingest": watch.check}, pause_s=0)
    with pytest.raises(SpooledAccepts, match="40 events of ingest ramp at 500/s"):
        bench.ingest.ramp({"ingest": 1}, lambda p, s: lambda i: b"", 1.0, warmup_s=0.1, after_step=after)
