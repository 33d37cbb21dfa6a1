"""A Spark standalone cluster on loopback: one master and two one-core workers, started from the
installed pyspark distribution's classes (``bin/spark-class``), each a process the test stops by PID.

Jobs reach it by configuration alone (``TALLY_SPARK__MASTER=spark://127.0.0.1:<port>``); the
master's JSON status page tells which applications ran on it and with how many cores.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pyspark

from ops.processes import Service, Supervisor
from ops.stack import free_ports
from tests.integration.conftest import wait_for

SPARK_HOME = Path(pyspark.__file__).parent
MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"
# The cluster's JVMs (master, workers, executors) compile with C1 alone, as conf/test.yaml has the
# drivers and the broker do (docs/TESTING.md, "JVMs: C1 only in the tests").
C1_ONLY = "-XX:TieredStopAtLevel=1"


@dataclass(frozen=True)
class SparkCluster:
    master_url: str  # spark://127.0.0.1:<port>
    status_url: str  # the master's web UI, whose /json/ is its status
    conf_dir: Path  # SPARK_CONF_DIR of the drivers: spark-defaults.conf with the executors' JVM options

    @property
    def driver_env(self) -> dict[str, str]:
        """What a job's environment adds to run on the cluster: its master and the executors' options."""
        return {"TALLY_SPARK__MASTER": self.master_url, "SPARK_CONF_DIR": str(self.conf_dir)}

    def status(self) -> dict[str, Any]:
        """The master's view: alive workers, running and completed applications."""
        found: dict[str, Any] = httpx.get(self.status_url + "/json/", timeout=5).json()
        return found

    def applications(self) -> list[dict[str, Any]]:
        """Every application that ran or runs on the cluster (name, cores, state)."""
        status = self.status()
        return [*status.get("activeapps", []), *status.get("completedapps", [])]


def _alive_workers(cluster: SparkCluster) -> int:
    try:
        return sum(1 for w in cluster.status().get("workers", []) if w.get("state") == "ALIVE")
    except (httpx.HTTPError, ValueError):
        return 0


@contextlib.contextmanager
def spark_cluster(home: Path, *, workers: int = 2, worker_memory: str = "1g") -> Iterator[SparkCluster]:
    """Start a master and ``workers`` one-core workers on free loopback ports; stop them all at the end."""
    supervisor = Supervisor(home)
    master_port, master_ui, *worker_uis = free_ports(2 + workers)
    conf_dir = home / "conf"
    conf_dir.mkdir(parents=True, exist_ok=True)
    (conf_dir / "spark-defaults.conf").write_text(f"spark.executor.extraJavaOptions {C1_ONLY}\n")
    cluster = SparkCluster(f"spark://127.0.0.1:{master_port}", f"http://127.0.0.1:{master_ui}", conf_dir)
    env = {
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_DAEMON_JAVA_OPTS": C1_ONLY,
        "SPARK_LOG_DIR": str(home / "logs"),
        "PYSPARK_PYTHON": sys.executable,  # executors run the project's venv Python
    }
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    names = ["spark-master", *(f"spark-worker-{i + 1}" for i in range(workers))]
    try:
        supervisor.start(
            Service(
                "spark-master",
                [
                    spark_class,
                    MASTER,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(master_port),
                    "--webui-port",
                    str(master_ui),
                ],
                port=master_port,
                env=env,
                ready=functools.partial(_answers, cluster),
                ready_timeout=120,
            )
        )
        for name, ui in zip(names[1:], worker_uis, strict=True):
            work_dir = home / name
            work_dir.mkdir(parents=True, exist_ok=True)
            options = ["--webui-port", str(ui), "--work-dir", str(work_dir), cluster.master_url]
            supervisor.start(
                Service(
                    name,
                    [spark_class, WORKER, "--host", "127.0.0.1", "--cores", "1", "--memory", worker_memory, *options],
                    env=env,
                )
            )
        wait_for(lambda: _alive_workers(cluster) == workers, 120, f"{workers} Spark workers to register")
        yield cluster
    finally:
        for name in reversed(names):
            supervisor.stop(name)


def _answers(cluster: SparkCluster) -> bool:
    try:
        cluster.status()
        return True
    except (httpx.HTTPError, ValueError):
        return False
