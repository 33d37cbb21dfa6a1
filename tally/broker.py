"""The bundled Apache Kafka broker: KRaft combined mode, one node, 127.0.0.1 only.

``tally up`` formats the storage directory once, runs the broker with ``java``, waits until
it answers and creates the topics from config. With ``kafka.bootstrap_servers`` set, Tally
uses that external cluster instead and only creates the topics.
"""

from __future__ import annotations

import logging
import subprocess
import time
import uuid
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from tally.bootstrap import JARS_DIR, SetupError, java_binary, kafka_jars
from tally.log import kv
from tally.settings import Settings

log = logging.getLogger("tally.broker")

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


def data_dir(settings: Settings) -> Path:
    """Where the bundled broker keeps its log segments and KRaft metadata."""
    return settings.home_dir / "kafka" / "data"


def broker_properties(settings: Settings) -> str:
    """server.properties for a single combined broker+controller node on loopback."""
    k = settings.kafka
    return "\n".join(
        [
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{k.controller_port}",
            f"listeners=PLAINTEXT://127.0.0.1:{k.port},CONTROLLER://127.0.0.1:{k.controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{k.port}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            f"log.dirs={data_dir(settings)}",
            "num.partitions=1",
            "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "group.initial.rebalance.delay.ms=0",
            f"log.retention.hours={k.retention_hours}",
            "auto.create.topics.enable=false",
            "",
        ]
    )


def _config_path(settings: Settings) -> Path:
    conf = settings.home_dir / "kafka" / "server.properties"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(broker_properties(settings))
    (conf.parent / "log4j2.yaml").write_text(LOG4J2_CONFIG)
    return conf


def _java_command(settings: Settings, main_class: str, *args: str, heap: str) -> list[str]:
    log4j = settings.home_dir / "kafka" / "log4j2.yaml"
    return [
        java_binary(),
        f"-Xms{heap}",
        f"-Xmx{heap}",
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        str(JARS_DIR / "kafka-broker" / "*"),  # resolved by `tally setup` (see ensure_formatted)
        main_class,
        *args,
    ]


def ensure_formatted(settings: Settings) -> None:
    """Format the KRaft storage directory once; refuse a half-written one with advice."""
    kafka_jars()
    data = data_dir(settings)
    conf = _config_path(settings)
    if (data / "meta.properties").exists():
        return
    if data.exists() and any(data.iterdir()):
        raise SetupError(
            f"the Kafka data directory {data} is not empty but has no meta.properties "
            "(a half-written format?). If it holds nothing you need, delete it "
            f"(rm -rf {data}) and run the command again."
        )
    data.mkdir(parents=True, exist_ok=True)
    cluster_id = uuid.uuid4().hex[:22]
    cmd = _java_command(settings, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(conf), heap="256m")
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SetupError(f"formatting Kafka storage in {data} failed:\n{done.stdout}{done.stderr}")
    log.info("kafka storage formatted", extra=kv(dir=str(data)))


def broker_command(settings: Settings) -> list[str]:
    """The command line that runs the bundled broker in the foreground."""
    return _java_command(settings, "kafka.Kafka", str(_config_path(settings)), heap=settings.kafka.heap)


def console_consumer_command(settings: Settings, topic: str, *extra: str) -> list[str]:
    """Kafka's own console consumer (a real, independent client) for tests and debugging."""
    main = "org.apache.kafka.tools.consumer.ConsoleConsumer"
    return _java_command(
        settings, main, "--bootstrap-server", settings.kafka.servers, "--topic", topic, *extra, heap="256m"
    )


def broker_answers(servers: str, timeout: float = 2.0) -> bool:
    """True when a broker at ``servers`` returns cluster metadata."""
    # log_level 0: a probe of a broker that is still starting is expected to fail quietly.
    admin = AdminClient({"bootstrap.servers": servers, "socket.timeout.ms": int(timeout * 1000), "log_level": 0})
    try:
        admin.list_topics(timeout=timeout)
        return True
    except KafkaException:
        return False


def wait_until_ready(servers: str, timeout: float = 60.0) -> None:
    """Block until the broker answers, or raise with a pointer to its log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if broker_answers(servers):
            return
        time.sleep(0.5)
    raise SetupError(f"Kafka at {servers} did not answer within {timeout:.0f}s; see its log")


def ensure_topics(settings: Settings) -> None:
    """Create the topics Tally needs if they are missing (idempotent)."""
    k = settings.kafka
    wanted = [
        NewTopic(
            k.pageviews_topic,
            num_partitions=k.pageviews_partitions,
            replication_factor=1,
            config={"retention.ms": str(k.retention_hours * 3600_000)},
        ),
        NewTopic(
            k.rejected_topic,
            num_partitions=1,
            replication_factor=1,
            config={"retention.ms": str(k.retention_hours * 3600_000)},
        ),
        NewTopic(k.ratelimit_topic, num_partitions=1, replication_factor=1, config={"cleanup.policy": "compact"}),
    ]
    admin = AdminClient({"bootstrap.servers": k.servers})
    existing = set(admin.list_topics(timeout=10).topics)
    missing = [t for t in wanted if t.topic not in existing]
    for topic, future in admin.create_topics(missing).items() if missing else []:
        try:
            future.result()
            log.info("topic created", extra=kv(topic=topic))
        except KafkaException as e:
            if "TOPIC_ALREADY_EXISTS" not in str(e):
                raise
