"""schemathesis against the served OpenAPI spec: no 5xx, and every refusal in the dead letters."""

from __future__ import annotations

import re
import subprocess
import sys

import httpx

from tally.settings import Settings
from tests.integration.conftest import wait_for
from tests.integration.kafka_reader import read_topic

CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


def refusals_counted(ingest_url: str) -> int:
    """Events refused so far, by the endpoint's own Prometheus counter (every outcome but accepted)."""
    text = httpx.get(ingest_url + "/metrics").text
    return int(
        sum(
            float(v)
            for outcome, v in re.findall(r'tally_ingest_events_total\{outcome="(\w+)"\} (\S+)', text)
            if outcome != "accepted"
        )
    )


def test_fuzzing_the_api_finds_no_server_error_and_every_refusal_is_a_dead_letter(
    settings: Settings, ingest_url: str
) -> None:
    letters_before = len(read_topic(settings.kafka.servers, settings.kafka.rejected_topic))
    refused_before = refusals_counted(ingest_url)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "schemathesis.cli",
            "run",
            f"{ingest_url}/openapi.json",
            "--url",
            ingest_url,
            "--checks",
            CHECKS,
            "--max-examples",
            "150",
            "--seed",
            "7",
            "--no-color",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-4000:]
    refused = refusals_counted(ingest_url) - refused_before
    assert refused > 50, "the fuzzer should have produced many invalid requests"
    wait_for(
        lambda: len(read_topic(settings.kafka.servers, settings.kafka.rejected_topic)) - letters_before == refused,
        30,
        f"{refused} dead letters, one for each refusal",
    )
