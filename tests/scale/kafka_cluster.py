"""A three-broker KRaft cluster on loopback: combined broker+controller nodes on free ports, configured
by :mod:`ops.broker` (the same generator as the bundled broker), each its own process stopped by PID.
"""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

from confluent_kafka.admin import AdminClient

from ops import broker
from ops.processes import Service, Supervisor
from ops.stack import free_ports
from tally.settings import Settings
from tests.integration.conftest import wait_for


@dataclass(frozen=True)
class KafkaCluster:
    nodes: tuple[broker.BrokerNode, ...]
    supervisor: Supervisor

    @property
    def servers(self) -> str:
        return ",".join(node.servers for node in self.nodes)

    def leader(self, topic: str, partition: int) -> int:
        """Node id leading a partition now."""
        metadata = AdminClient({"bootstrap.servers": self.servers}).list_topics(topic, timeout=10)
        leader: int = metadata.topics[topic].partitions[partition].leader
        return leader

    def in_sync(self, topic: str) -> dict[int, int]:
        """In-sync replica count per partition of a topic."""
        metadata = AdminClient({"bootstrap.servers": self.servers}).list_topics(topic, timeout=10)
        return {p: len(m.isrs) for p, m in metadata.topics[topic].partitions.items()}

    def kill9(self, node_id: int) -> int:
        """SIGKILL one broker (no clean shutdown); return the PID killed."""
        running = self.supervisor.find(f"broker-{node_id}")
        assert running is not None, f"broker {node_id} is not running"
        os.kill(running.pid, signal.SIGKILL)
        wait_for(lambda: self.supervisor.find(f"broker-{node_id}") is None, 30, f"broker {node_id} to be gone")
        return running.pid


def cluster_nodes(count: int = 3) -> tuple[broker.BrokerNode, ...]:
    """Node ids 1..count on free loopback ports, each in its own folder under <home>/kafka."""
    ports = free_ports(2 * count)
    return tuple(broker.BrokerNode(i + 1, ports[2 * i], ports[2 * i + 1], f"node-{i + 1}") for i in range(count))


@contextlib.contextmanager
def kafka_cluster(settings: Settings, nodes: tuple[broker.BrokerNode, ...]) -> Iterator[KafkaCluster]:
    """Format and start every node (they elect a controller together), create Tally's topics with the
    settings' replication factor and min.insync.replicas, and stop every node at the end."""
    supervisor = Supervisor(settings.home_dir)
    cluster = KafkaCluster(nodes, supervisor)
    cluster_id = uuid.uuid4().hex[:22]
    try:
        for node in nodes:
            broker.ensure_formatted(settings, node, nodes, cluster_id)
            command = broker.broker_command(settings, node, nodes)
            supervisor.start(Service(f"broker-{node.node_id}", command, port=node.port))
        for node in nodes:
            broker.wait_until_ready(node.servers, timeout=120)
        broker.ensure_topics(settings)
        yield cluster
    finally:
        # Throwaway brokers: SIGKILL all at once; a graceful stop waits for a quorum that is leaving too.
        for node in nodes:
            running = supervisor.find(f"broker-{node.node_id}")
            if running is not None:
                os.kill(running.pid, signal.SIGKILL)
        for node in nodes:
            supervisor.stop(f"broker-{node.node_id}")
