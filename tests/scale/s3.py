"""A local S3 API for the object-storage tests: moto's server mode, on a free loopback port.

The credentials are throwaway values that only this local server accepts.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3  # type: ignore[import-untyped]
import httpx

from ops.stack import free_ports
from tests.integration.conftest import wait_for

ACCESS_KEY = "tally-test-key"
SECRET_KEY = "tally-test-secret"  # only the local moto server accepts it
REGION = "us-east-1"


@dataclass(frozen=True)
class LocalS3:
    endpoint: str
    bucket: str

    def warehouse_env(self, prefix: str) -> dict[str, str]:
        """TALLY_WAREHOUSE__* variables that put the warehouse at ``s3a://<bucket>/<prefix>`` here."""
        return {
            "TALLY_WAREHOUSE__PATH": f"s3a://{self.bucket}/{prefix}",
            "TALLY_WAREHOUSE__ENDPOINT": self.endpoint,
            "TALLY_WAREHOUSE__REGION": REGION,
            "TALLY_WAREHOUSE__ACCESS_KEY_ID": ACCESS_KEY,
            "TALLY_WAREHOUSE__SECRET_ACCESS_KEY": SECRET_KEY,
            "TALLY_WAREHOUSE__PATH_STYLE_ACCESS": "true",
            "TALLY_WAREHOUSE__ALLOW_HTTP": "true",
        }

    def client(self) -> Any:
        """A boto3 S3 client of this server (an independent client, not the code under test)."""
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name=REGION,
        )

    def keys(self, prefix: str) -> list[str]:
        """Every object key under ``prefix`` (an independent look at what is stored)."""
        found: list[str] = []
        for page in self.client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            found += [item["Key"] for item in page.get("Contents", [])]
        return found


def _answers(endpoint: str) -> bool:
    try:
        return httpx.get(endpoint + "/moto-api/", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


@contextlib.contextmanager
def local_s3(log_dir: Path, bucket: str = "tally-warehouse") -> Iterator[LocalS3]:
    """Run moto's S3 server until the block ends (stopped by PID), with one empty bucket."""
    (port,) = free_ports(1)
    endpoint = f"http://127.0.0.1:{port}"
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / "moto.log", "ab") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=log
        )
    try:
        wait_for(lambda: _answers(endpoint), 30, f"the local S3 server on {endpoint}")
        s3 = LocalS3(endpoint, bucket)
        s3.client().create_bucket(Bucket=bucket)
        yield s3
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(5)
