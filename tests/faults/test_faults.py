"""Faults under steady load through ingest, each ending with the reconciliation: 0 lost, 0 doubled.

Every test runs a private stack (broker, ingest with two workers, archiver, streaming views),
sends steady load over HTTP (failed requests retried with the same event_id), does its fault,
then drains and compares the accepted events with Kafka, raw and the views, runs
``tally audit`` (exit 0), and searches every byte at rest for the client IPs and for the secrets
the load planted in URLs and referrers (0 found), Plausible bodies naming a configured and an
unknown domain among them.
The short versions run in CI; the full-length ones are marked ``long`` (``make test-faults``).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from quality.leaks import Needles, ScanResult, scan_files, scan_kafka
from tests.faults.load import SteadyLoad
from tests.faults.payloads import PLANTED
from tests.faults.reconcile import assert_nothing_lost_or_doubled, drain, eventually, raw_ids, reconcile
from tests.faults.stack import FaultStack, fault_stack
from tests.integration.conftest import wait_for


@dataclass(frozen=True)
class Timing:
    """How long each phase of a fault test lasts (seconds)."""

    before: float  # steady load before the fault
    after: float  # and after it
    outage: float  # how long the broker stays down
    drain: float  # bound on waiting for Kafka, raw and the views to catch up


SHORT = Timing(before=5, after=5, outage=10, drain=420)
LONG = Timing(before=60, after=60, outage=30, drain=900)


def finish(stack: FaultStack, load: SteadyLoad, timing: Timing) -> tuple[set[str], ScanResult]:
    """Stop the load, drain, reconcile (asserting 0 lost, 0 doubled, audit clean) and read every
    Kafka record for the client IPs and planted secrets; the caller scans the files once the stack is down."""
    report = load.stop()
    drain(stack, report, timing.drain)
    result = reconcile(stack, report)
    print(
        f"\nreconciliation: {result.summary()}; {report.failed_attempts} failed requests retried, "
        f"{report.resent} accepted events sent again, {report.plausible_accepted} Plausible bodies accepted"
    )
    assert_nothing_lost_or_doubled(result, report)
    assert report.plausible_accepted > 0, "no Plausible body with a configured and an unknown domain was accepted"
    scan = ScanResult()
    scan_kafka(stack.settings.kafka.servers, report.client_ips, scan, needles=Needles.of(PLANTED))
    return report.client_ips, scan


def assert_the_kafka_scan_finds_a_planted_ip(servers: str) -> None:
    """The decoded Kafka search can fail: an address and a needle inside lz4-compressed records are found.

    The probe's needle is not one of PLANTED: the file scan that follows must still find 0 of those.
    """
    probe, needle, topic = "198.51.100.99", "probe-needle-5d0c2e@leak-test.example", "leak-probe"
    admin = AdminClient({"bootstrap.servers": servers})  # kept alive until the topic exists
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": servers, "compression.type": "lz4", "linger.ms": 100})
    for i in range(50):
        producer.produce(topic, value=json.dumps({"n": i, "client": probe, "url": f"/?to={needle}"}).encode())
    assert producer.flush(30) == 0
    found = ScanResult()
    scan_kafka(servers, {probe}, found, needles=Needles.of([needle]))
    in_probe = [m for m in found.leaks if m.where.startswith(f"kafka {topic}/")]
    assert {(m.found, m.form) for m in in_probe} == {(needle, "needle"), (probe, "text")}, in_probe[:3]
    assert len(in_probe) == 100, in_probe[:3]


def assert_no_ip_at_rest(home: Path, ips: set[str], scan: ScanResult) -> None:
    """No client IP, and none of the secrets the load planted in URLs and referrers, anywhere under ``home``."""
    assert scan.kafka_records > 0, "the Kafka scan read nothing"
    # finish() read every topic decoded, so a packed form in a compressed batch of a log segment is chance. The
    # one topic written after it, the probe's, holds its 50 synthetic records alone: no client's address.
    scan_files(home, ips, scan, needles=Needles.of(PLANTED), kafka_decoded=True)
    print(f"leak scan of {home}: {scan.summary()} (about {scan.expected_chance(len(ips)):.3f} expected by chance)")
    assert scan.files > 0, "the scan read nothing: wrong home?"
    assert not scan.leaks, f"client IPs or planted secrets at rest: {scan.leaks[:10]}"


def kill_the_archiver_three_times(stack: FaultStack, load: SteadyLoad, timing: Timing) -> None:
    """kill -9 the archiver three times, each time while it is archiving, restarting it at once."""
    rng = random.Random(7)

    def archived() -> int:
        return sum(raw_ids(stack.settings, stack.site).values())

    def more_than(rows: int) -> Callable[[], bool]:
        return lambda: archived() > rows

    for _ in range(3):
        wait_for(more_than(archived()), 120, "the archiver to archive since its (re)start")
        time.sleep(rng.uniform(0.2, 2.0))
        stack.kill9("archiver")
        stack.start("archiver")


def _checkpoint_batches(stack: FaultStack, folder: str) -> int:
    """The newest micro-batch of the traffic query with a file in ``offsets`` (started) or ``commits`` (done)."""
    names = [p.name for p in (stack.home / "checkpoints" / "traffic" / folder).glob("[0-9]*")]
    return max((int(n) for n in names if n.isdigit()), default=-1)


def kill_the_streaming_job_mid_batch(stack: FaultStack, load: SteadyLoad, timing: Timing) -> None:
    """kill -9 the views job (driver and JVM) while a traffic micro-batch is in flight, then restart it."""

    def in_flight() -> bool:  # Spark writes offsets/N when a micro-batch starts, commits/N when it ends
        done = _checkpoint_batches(stack, "commits")
        return done >= 0 and _checkpoint_batches(stack, "offsets") > done

    wait_for(in_flight, 300, "a traffic micro-batch in flight after the first one committed")
    assert stack.supervisor.find("views") is not None, "the views job died by itself; see its log"
    stack.kill9("views")
    stack.start("views")


def stop_the_broker(stack: FaultStack, load: SteadyLoad, timing: Timing) -> None:
    """Stop the broker for ``timing.outage`` seconds under load, then start it again."""
    stack.stop("broker")
    stopped, accepted = time.monotonic(), load.accepted_so_far()
    wait_for(lambda: load.accepted_so_far() > accepted + 20, 60, "ingest to accept events into its spool")
    time.sleep(max(0.0, timing.outage - (time.monotonic() - stopped)))
    stack.start("broker")


def kill_one_ingest_worker(stack: FaultStack, load: SteadyLoad, timing: Timing) -> None:
    """kill -9 one of ingest's two uvicorn workers: the other keeps serving, uvicorn starts a new one."""
    workers = stack.ingest_workers()
    assert len(workers) == 2, f"expected 2 uvicorn workers, found {[w.pid for w in workers]}"
    victim = workers[0]
    victim.kill()  # SIGKILL to this worker only
    accepted = load.accepted_so_far()
    assert eventually(lambda: load.accepted_so_far() > accepted + 20, 30), "ingest stopped serving"
    wait_for(
        lambda: len(stack.ingest_workers()) == 2 and victim.pid not in {w.pid for w in stack.ingest_workers()},
        60,
        "uvicorn to start a worker in place of the killed one",
    )


FAULTS = {
    "archiver-kill-9-three-times": kill_the_archiver_three_times,
    "views-kill-9-mid-batch": kill_the_streaming_job_mid_batch,
    "broker-stopped": stop_the_broker,
    "ingest-worker-kill-9": kill_one_ingest_worker,
}


def test_every_fault_in_turn_under_steady_load_loses_and_doubles_nothing(tmp_path: Path) -> None:
    """The CI version: one stack, one steady load, the four faults one after another (short), one audit.

    The archiver and ingest faults come while Spark starts; the broker stops once the views job
    has committed its first micro-batch, and the views job is killed last, once the broker is back.
    """
    timing = SHORT
    with (
        fault_stack(tmp_path / "home", ingest_workers=2) as stack,
        SteadyLoad(stack.ingest_url, stack.site, other_site=stack.other_site) as load,
    ):
        time.sleep(timing.before)
        kill_the_archiver_three_times(stack, load, timing)
        kill_one_ingest_worker(stack, load, timing)
        wait_for(lambda: _checkpoint_batches(stack, "commits") >= 0, 300, "the views job's first micro-batch")
        stop_the_broker(stack, load, timing)
        kill_the_streaming_job_mid_batch(stack, load, timing)
        time.sleep(timing.after)
        for name in ("archiver", "views"):
            assert stack.supervisor.find(name) is not None, f"{name} died during the faults; see its log"
        ips, scan = finish(stack, load, timing)
        assert_the_kafka_scan_finds_a_planted_ip(stack.settings.kafka.servers)
    assert_no_ip_at_rest(stack.home, ips, scan)


@pytest.mark.long
@pytest.mark.parametrize("fault", list(FAULTS))
def test_each_fault_alone_at_full_length_loses_and_doubles_nothing(tmp_path: Path, fault: str) -> None:
    timing = LONG
    with (
        fault_stack(tmp_path / "home", ingest_workers=2) as stack,
        SteadyLoad(stack.ingest_url, stack.site, other_site=stack.other_site) as load,
    ):
        time.sleep(timing.before)
        FAULTS[fault](stack, load, timing)
        time.sleep(timing.after)
        for name in ("archiver", "views"):
            assert stack.supervisor.find(name) is not None, f"{name} died after the fault; see its log"
        ips, scan = finish(stack, load, timing)
    assert_no_ip_at_rest(stack.home, ips, scan)
