"""A cluster under test: one ZooKeeper and three brokers as real processes, wirebroker's or Kafka's.

The failure tests drive either kind through one interface — kill -9, SIGSTOP/SIGCONT, a clean
stop (with controlled shutdown), a restart on the same port and data — so each scenario can be
run against Apache Kafka 3.9 too (``WIREBROKER_CLUSTER_TARGET=kafka``), which is how the
scenarios themselves were checked. Cluster state is read the way clients read it (Metadata
through confluent-kafka's admin client); nothing here looks inside a broker. ZooKeeper itself is
read through a kazoo session: `zk_session` for any test that reads or prepares znodes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import pytest
from kazoo.client import KazooClient

from compat.kafka_process import (
    KAFKA_MAIN,
    LOOPBACK,
    JavaProcess,
    ZooKeeperServer,
    free_port,
    jars_available,
    jars_dir,
    java_command,
    kafka_api_versions,
    kafka_properties,
    write_log4j_config,
    zookeeper,
    zookeeper_ruok,
)
from protocol.messages.metadata import MetadataRequest, MetadataResponse
from tests.broker_process import BrokerProcess
from tests.wirebroker.helpers import RawClient, wait_until

#: Broker settings both kinds share: a 3-replica, min-ISR-2 cluster that notices failures fast.
CLUSTER_PROPERTIES = {
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
    "replica.lag.time.max.ms": "4000",
    "zookeeper.session.timeout.ms": "6000",
    "unclean.leader.election.enable": "false",
    "auto.create.topics.enable": "false",
    # One transaction log partition: one coordinator for every transactional id.
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "1",
}


class PartitionState(NamedTuple):
    leader: int
    leader_epoch: int
    replicas: list[int]
    isrs: list[int]


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    """`wait_until` for the process cluster: a predicate failing (a broker or ZooKeeper
    restarting) counts as not yet."""
    return wait_until(predicate, timeout, interval, what, ignoring=(Exception,))


@contextlib.contextmanager
def zk_session(client: KazooClient, timeout: float = 10) -> Iterator[KazooClient]:
    """`client` started (its session within `timeout` seconds), stopped and closed after."""
    client.start(timeout=timeout)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def expire_session(connect: str, credentials: tuple[int, bytes]) -> None:
    """Close a session from outside with its id and password: ZooKeeper expires it at once."""
    hosts, _, _ = connect.partition("/")
    with zk_session(KazooClient(hosts=hosts, client_id=credentials, timeout=6)):
        pass


class Node(Protocol):
    """One broker process of either kind."""

    node_id: int
    port: int
    data_dir: Path

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def kill(self) -> None: ...
    def alive(self) -> bool: ...
    def pid(self) -> int: ...
    def log_tail(self, lines: int = 40) -> str: ...


class WirebrokerNode:
    """A wirebroker broker process (``python -m wirebroker serve``) in cluster mode."""

    def __init__(self, node_id: int, data_dir: Path, properties: dict[str, str]) -> None:
        self.node_id = node_id
        self.data_dir = data_dir
        self.process = BrokerProcess(data_dir, properties)
        self.process.port = free_port()
        self.port = self.process.port

    def start(self) -> None:
        self.process.start()

    def stop(self) -> None:
        self.process.stop(timeout=60.0)

    def kill(self) -> None:
        self.process.kill()

    def alive(self) -> bool:
        return self.process.alive()

    def pid(self) -> int:
        assert self.process.proc is not None
        return self.process.proc.pid

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.process.log[-lines:])


class KafkaNode:
    """An Apache Kafka 3.9 broker process (ZooKeeper mode) from the project's jars."""

    def __init__(self, node_id: int, data_dir: Path, properties: dict[str, str]) -> None:
        self.node_id = node_id
        self.data_dir = data_dir
        self.port = free_port()
        base = data_dir.parent / f"kafka-{node_id}"
        base.mkdir(parents=True, exist_ok=True)
        props = kafka_properties(
            broker_id=node_id,
            port=self.port,
            zookeeper_connect=properties["zookeeper.connect"],
            log_dir=data_dir,
            overrides={k: v for k, v in properties.items() if k != "zookeeper.connect"},
        )
        cfg = base / "server.properties"
        cfg.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        log4j = write_log4j_config(base / "log4j.properties", "INFO")
        argv = java_command(KAFKA_MAIN, [str(cfg)], heap="512m", log4j_config=log4j)
        self.process = JavaProcess(f"kafka-{node_id}", argv, base / "kafka.log", base)

    def start(self) -> None:
        self.process.start()
        wait_for(
            lambda: kafka_api_versions(LOOPBACK, self.port),
            90.0,
            f"Kafka broker {self.node_id} to answer ApiVersions",
            interval=0.5,
        )

    def stop(self) -> None:
        self.process.stop(timeout=60.0)

    def kill(self) -> None:
        if self.process.popen is not None and self.process.popen.poll() is None:
            self.process.popen.kill()
            self.process.popen.wait()
        self.process.stop()

    def alive(self) -> bool:
        return self.process.running()

    def pid(self) -> int:
        assert self.process.pid is not None
        return self.process.pid

    def log_tail(self, lines: int = 40) -> str:
        return self.process.log_tail(lines)


@dataclass(eq=False)
class Cluster:
    """ZooKeeper plus brokers; every process is stopped when the fixture ends."""

    kind: str
    zk: ZooKeeperServer
    nodes: dict[int, Node]
    paused: set[int] = field(default_factory=set)
    _admin: Any = None

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{LOOPBACK}:{n.port}" for n in self.nodes.values())

    def node(self, node_id: int) -> Node:
        return self.nodes[node_id]

    # faults -------------------------------------------------------------------------------
    def kill_and_restart(self, node_id: int) -> None:
        """kill -9, then start again once the cluster noticed (its ZooKeeper session expired).

        A broker cannot register while its previous session's znode is still there: Kafka exits
        if it tries, so the restart waits until Metadata no longer lists the broker.
        """
        self.nodes[node_id].kill()
        self.wait_gone(node_id)
        self.nodes[node_id].start()

    def wait_gone(self, node_id: int) -> None:
        """Until the broker's registration znode is gone (its ZooKeeper session expired).

        Asked of ZooKeeper itself: a broker that just started may not know the others yet.
        """
        with zk_session(KazooClient(hosts=self.zk.connect), 30) as zk:
            wait_for(
                lambda: zk.exists(f"/brokers/ids/{node_id}") is None,
                60.0,
                f"the registration of broker {node_id} to expire",
            )

    def pause(self, node_id: int) -> None:
        os.kill(self.nodes[node_id].pid(), signal.SIGSTOP)
        self.paused.add(node_id)

    def resume(self, node_id: int) -> None:
        os.kill(self.nodes[node_id].pid(), signal.SIGCONT)
        self.paused.discard(node_id)

    def restart_zookeeper(self, down_for: float = 2.0) -> None:
        """Stop ZooKeeper (clean), keep it down for ``down_for`` seconds, start it again."""
        self.zk.process.stop()
        time.sleep(down_for)  # the outage itself is the scenario
        self.zk.process.start()
        wait_for(lambda: zookeeper_ruok(self.zk.host, self.zk.port), 60.0, "ZooKeeper to restart")

    # what clients see ---------------------------------------------------------------------
    def admin(self) -> Any:
        """One admin client for the cluster's life (its futures die with it)."""
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient({"bootstrap.servers": self.bootstrap})
        return self._admin

    def metadata(self, topics: list[str] | None = None) -> MetadataResponse:
        """Metadata v12 from the first running, unpaused broker that answers.

        Asked directly rather than through a client, which may keep asking a paused broker.
        """
        request = MetadataRequest(
            topics=None
            if topics is None
            else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False,
        )
        for node_id, node in self.nodes.items():
            if node_id in self.paused or not node.alive():
                continue
            try:
                with RawClient(f"{LOOPBACK}:{node.port}", timeout=3.0) as client:
                    response: MetadataResponse = client.request(request, 12)
                    return response
            except (OSError, ConnectionError):
                continue
        raise RuntimeError("no broker answered Metadata")

    def brokers(self) -> set[int]:
        """The brokers the cluster lists as alive."""
        return {b.node_id for b in self.metadata([]).brokers}

    def controller(self) -> int:
        return int(self.metadata([]).controller_id)

    def partitions(self, topic: str) -> dict[int, PartitionState]:
        """Each partition's leader, leader epoch, replicas and ISR, as a client sees them."""
        (t,) = self.metadata([topic]).topics
        if t.error_code:
            raise RuntimeError(f"{topic}: error {t.error_code}")
        return {
            p.partition_index: PartitionState(
                p.leader_id, p.leader_epoch, list(p.replica_nodes), list(p.isr_nodes)
            )
            for p in t.partitions
        }

    def leader(self, topic: str, partition: int, timeout: float = 60.0) -> int:
        """The partition's current leader (waits until there is one)."""
        return int(
            wait_for(
                lambda: _live_leader(self, topic, partition),
                timeout,
                f"a leader for {topic}-{partition}",
            )
        )

    def wait_isr(self, topic: str, partition: int, isr: set[int], timeout: float = 60.0) -> None:
        wait_for(
            lambda: set(self.partitions(topic)[partition].isrs) == isr,
            timeout,
            f"ISR of {topic}-{partition} to be {sorted(isr)}",
        )

    def wait_fully_replicated(self, topic: str, timeout: float = 90.0) -> None:
        """Every partition has a leader and all its replicas in the ISR."""

        def done() -> bool:
            parts = self.partitions(topic)
            return bool(parts) and all(
                p.leader >= 0 and set(p.isrs) == set(p.replicas) for p in parts.values()
            )

        wait_for(done, timeout, f"every replica of {topic} in sync")

    def create_topic(
        self, name: str, partitions: int = 3, configs: dict[str, str] | None = None
    ) -> None:
        from confluent_kafka.admin import NewTopic

        futures = self.admin().create_topics(
            [NewTopic(name, partitions, 3, config=configs or {})], operation_timeout=30
        )
        futures[name].result(60)
        self.wait_fully_replicated(name)

    def log_tails(self, lines: int = 40) -> str:
        return "\n".join(f"--- broker {i} ---\n{n.log_tail(lines)}" for i, n in self.nodes.items())


def _live_leader(cluster: Cluster, topic: str, partition: int) -> int | None:
    leader = cluster.partitions(topic)[partition].leader
    return leader if leader in cluster.nodes and cluster.nodes[leader].alive() else None


@contextlib.contextmanager
def running_cluster(
    kind: str,
    size: int = 3,
    overrides: dict[str, str] | None = None,
    node_overrides: Callable[[int], dict[str, str]] | None = None,
) -> Iterator[Cluster]:
    """ZooKeeper and ``size`` brokers of ``kind`` (``wirebroker`` or ``kafka``), all stopped after;
    ``node_overrides(id)``: one broker's own settings (its ``broker.rack``)."""
    if not jars_available():
        pytest.skip(f"no ZooKeeper jars in {jars_dir()}: run `make jars`")
    base = Path(tempfile.mkdtemp(prefix=f"wb-cluster-{kind}-"))
    try:
        with zookeeper(workdir=base / "zookeeper") as zk:
            props = {**CLUSTER_PROPERTIES, **(overrides or {}), "zookeeper.connect": zk.connect}
            make = WirebrokerNode if kind == "wirebroker" else KafkaNode
            nodes: dict[int, Node] = {}
            try:
                for node_id in range(1, size + 1):
                    own = node_overrides(node_id) if node_overrides is not None else {}
                    node_props = {**props, **own, "broker.id": str(node_id)}
                    nodes[node_id] = make(node_id, base / f"broker-{node_id}", node_props)
                for node in nodes.values():
                    node.start()
                cluster = Cluster(kind, zk, nodes)
                wait_for(
                    lambda: len(cluster.brokers()) == size,
                    90.0,
                    f"all {size} brokers registered",
                )
                try:
                    yield cluster
                except BaseException:
                    # What each broker said last: pytest shows it with the failure.
                    print(cluster.log_tails(120), file=sys.stderr)
                    raise
            finally:
                for node in nodes.values():  # brokers go before ZooKeeper does
                    if node.alive():
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(node.pid(), signal.SIGCONT)
                    node.kill()
    finally:
        shutil.rmtree(base, ignore_errors=True)
