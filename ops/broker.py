"""The bundled Apache Kafka broker: KRaft combined mode, one node, 127.0.0.1 only.

``tally up`` formats the storage directory once, runs the broker with ``java``, waits until
it answers and creates the topics from config. With ``kafka.bootstrap_servers`` set, Tally
uses that external cluster instead and only creates the topics (with
``kafka.replication_factor`` and ``kafka.min_insync_replicas``).

The same configuration generator describes a cluster of several combined nodes on loopback
(:class:`BrokerNode`), which the scale-out tests run to kill one broker under load.
"""

from __future__ import annotations

import logging
import shlex
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from ops.bootstrap import kafka_jars
from tally.jvm import JARS_DIR, SetupError, java_binary
from tally.log import kv
from tally.settings import Settings

log = logging.getLogger("ops.broker")

LOG4J2_CONFIG = """\
Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        Pattern: "%d{ISO8601} %p %c{1} %m%n"
  Loggers:
    Root:
      level: WARN
      AppenderRef: [{ref: STDOUT}]
    Logger:
      - {name: kafka.server.KafkaRaftServer, level: INFO, additivity: false, AppenderRef: [{ref: STDOUT}]}
      - {name: kafka.server.BrokerServer, level: INFO, additivity: false, AppenderRef: [{ref: STDOUT}]}
"""


@dataclass(frozen=True)
class BrokerNode:
    """One combined broker+controller node on loopback: its id, ports and folder under ``<home>/kafka``."""

    node_id: int
    port: int
    controller_port: int
    folder: str = ""  # "" = the bundled node's <home>/kafka; else <home>/kafka/<folder>

    @property
    def servers(self) -> str:
        return f"127.0.0.1:{self.port}"


def bundled_node(settings: Settings) -> BrokerNode:
    """The single node ``tally up`` runs."""
    return BrokerNode(1, settings.kafka.port, settings.kafka.controller_port)


def _node_dir(settings: Settings, node: BrokerNode) -> Path:
    return settings.home_dir / "kafka" / node.folder if node.folder else settings.home_dir / "kafka"


def data_dir(settings: Settings, node: BrokerNode | None = None) -> Path:
    """Where a node (by default the bundled broker) keeps its log segments and KRaft metadata."""
    return _node_dir(settings, node or bundled_node(settings)) / "data"


def broker_properties(settings: Settings, node: BrokerNode | None = None, voters: Sequence[BrokerNode] = ()) -> str:
    """server.properties of one combined broker+controller node on loopback (by default the bundled one).

    ``voters`` are every node of the cluster (the KRaft quorum); internal topics are replicated
    ``kafka.replication_factor`` times, at most once per node.
    """
    k = settings.kafka
    node = node or bundled_node(settings)
    quorum = list(voters) or [node]
    replicas = min(k.replication_factor, len(quorum))
    min_isr = min(k.min_insync_replicas, replicas)
    return "\n".join(
        [
            "process.roles=broker,controller",
            f"node.id={node.node_id}",
            "controller.quorum.voters=" + ",".join(f"{v.node_id}@127.0.0.1:{v.controller_port}" for v in quorum),
            f"listeners=PLAINTEXT://127.0.0.1:{node.port},CONTROLLER://127.0.0.1:{node.controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{node.port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            f"log.dirs={data_dir(settings, node)}",
            "num.partitions=1",
            f"default.replication.factor={replicas}",
            f"min.insync.replicas={min_isr}",
            f"offsets.topic.replication.factor={replicas}",
            f"transaction.state.log.replication.factor={replicas}",
            f"transaction.state.log.min.isr={min_isr}",
            f"share.coordinator.state.topic.replication.factor={replicas}",
            f"share.coordinator.state.topic.min.isr={min_isr}",
            "group.initial.rebalance.delay.ms=0",
            f"log.retention.hours={k.retention_hours}",
            "auto.create.topics.enable=false",
            "",
        ]
    )


def _config_path(settings: Settings, node: BrokerNode | None = None, voters: Sequence[BrokerNode] = ()) -> Path:
    conf = _node_dir(settings, node or bundled_node(settings)) / "server.properties"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(broker_properties(settings, node, voters))
    log4j = settings.home_dir / "kafka" / "log4j2.yaml"
    log4j.parent.mkdir(parents=True, exist_ok=True)
    log4j.write_text(LOG4J2_CONFIG)
    return conf


def _java_command(settings: Settings, main_class: str, *args: str, heap: str, pretouch: bool = False) -> list[str]:
    log4j = settings.home_dir / "kafka" / "log4j2.yaml"
    return [
        java_binary(),
        f"-Xms{heap}",
        f"-Xmx{heap}",
        # The broker's heap is fixed (-Xms = -Xmx): back all of it at start, so its memory is known
        # (and refused) at once, not taken page by page over the first half hour of traffic.
        *(["-XX:+AlwaysPreTouch"] if pretouch else []),
        "-XX:+UseG1GC",
        *shlex.split(settings.kafka.java_options),
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        str(JARS_DIR / "kafka-broker" / "*"),  # resolved by `tally setup` (see ensure_formatted)
        main_class,
        *args,
    ]


def ensure_formatted(
    settings: Settings, node: BrokerNode | None = None, voters: Sequence[BrokerNode] = (), cluster_id: str = ""
) -> None:
    """Format a node's KRaft storage directory once (the bundled one by default); refuse a
    half-written one with advice. Every node of one cluster is formatted with the same ``cluster_id``."""
    kafka_jars()
    data = data_dir(settings, node)
    conf = _config_path(settings, node, voters)
    if (data / "meta.properties").exists():
        return
    if data.exists() and any(data.iterdir()):
        raise SetupError(
            f"the Kafka data directory {data} is not empty but has no meta.properties "
            "(a half-written format?). If it holds nothing you need, delete it "
            f"(rm -rf {data}) and run the command again."
        )
    data.mkdir(parents=True, exist_ok=True)
    cluster_id = cluster_id or uuid.uuid4().hex[:22]
    cmd = _java_command(settings, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(conf), heap="256m")
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SetupError(f"formatting Kafka storage in {data} failed:\n{done.stdout}{done.stderr}")
    log.info("kafka storage formatted", extra=kv(dir=str(data)))


def broker_command(settings: Settings, node: BrokerNode | None = None, voters: Sequence[BrokerNode] = ()) -> list[str]:
    """The command line that runs a node (the bundled broker by default) in the foreground."""
    conf = str(_config_path(settings, node, voters))
    return _java_command(settings, "kafka.Kafka", conf, heap=settings.kafka.heap, pretouch=True)


def console_consumer_command(settings: Settings, topic: str, *extra: str) -> list[str]:
    """Kafka's own console consumer (a real, independent client) for tests and debugging."""
    main = "org.apache.kafka.tools.consumer.ConsoleConsumer"
    return _java_command(
        settings, main, "--bootstrap-server", settings.kafka.servers, "--topic", topic, *extra, heap="256m"
    )


def broker_answers(
    servers: str, timeout: float = 2.0, client_config: Mapping[str, str | int | float | bool] | None = None
) -> bool:
    """True when a broker at ``servers`` returns cluster metadata (``client_config``: SASL/TLS properties)."""
    # log_level 0: a probe of a broker that is still starting is expected to fail quietly.
    probe = {**(client_config or {}), "bootstrap.servers": servers, "socket.timeout.ms": int(timeout * 1000)}
    admin = AdminClient({**probe, "log_level": 0})
    try:
        admin.list_topics(timeout=timeout)
        return True
    except KafkaException:
        return False


def wait_until_ready(
    servers: str, timeout: float = 60.0, client_config: Mapping[str, str | int | float | bool] | None = None
) -> None:
    """Block until the broker answers, or raise with a pointer to its log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if broker_answers(servers, client_config=client_config):
            return
        time.sleep(0.5)
    raise SetupError(f"Kafka at {servers} did not answer within {timeout:.0f}s; see its log")


def ensure_topics(settings: Settings) -> None:
    """Create the topics Tally needs if they are missing (idempotent), replicated as configured."""
    k = settings.kafka
    retention = {"retention.ms": str(k.retention_hours * 3600_000)}

    def new_topic(name: str, partitions: int, config: dict[str, str]) -> NewTopic:
        config = {**config, "min.insync.replicas": str(k.min_insync_replicas)}
        return NewTopic(name, num_partitions=partitions, replication_factor=k.replication_factor, config=config)

    wanted = [
        new_topic(k.pageviews_topic, k.pageviews_partitions, retention),
        new_topic(k.rejected_topic, 1, retention),
        new_topic(k.ratelimit_topic, 1, {"cleanup.policy": "compact"}),
        new_topic(k.sites_topic, 1, {"cleanup.policy": "compact"}),  # tally site: the records of ops/site_commands.py
    ]
    admin = AdminClient(k.client_config())
    existing = set(admin.list_topics(timeout=10).topics)
    missing = [t for t in wanted if t.topic not in existing]
    for topic, future in admin.create_topics(missing).items() if missing else []:
        try:
            future.result()
            log.info("topic created", extra=kv(topic=topic))
        except KafkaException as e:
            if "TOPIC_ALREADY_EXISTS" not in str(e):
                raise
