"""`wirebroker cluster` end to end: ZooKeeper and three broker processes, a topic with RF 3,
`__consumer_offsets` with Kafka's default RF 3, and a clean Ctrl-C that stops every process
(brokers by controlled shutdown, then ZooKeeper)."""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from protocol.errors import ErrorCode
from protocol.messages.create_topics import CreateTopicsRequest
from protocol.messages.describe_cluster import DescribeClusterRequest
from protocol.messages.find_coordinator import FindCoordinatorRequest
from tests.cluster.processes import zk_session
from tests.wirebroker.helpers import RawClient, host_port, scrape, value, wait_until
from wirebroker.zk import znodes
from wirebroker.zookeeper_server import jars_available

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not jars_available(), reason="no ZooKeeper jars: run `make jars`"),
]


class _Launcher:
    """`wirebroker cluster` (3 brokers on free ports, unless `extra` gives `--listeners`) as a
    process, its output kept in `lines`."""

    def __init__(self, data_dir: Path, *extra: str) -> None:
        cmd = [sys.executable, "-m", "wirebroker", "cluster", "--brokers", "3"]
        cmd += [] if "--listeners" in extra else ["--base-port", "0"]
        cmd += ["--zookeeper-port", "0", "--data-dir", str(data_dir)]
        self.proc = subprocess.Popen(
            [*cmd, *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())

    def found(self, pattern: str) -> re.Match[str] | None:
        return next((m for line in list(self.lines) if (m := re.search(pattern, line))), None)

    def interrupt(self) -> int:
        """Ctrl-C, and the launcher's exit code."""
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise


def test_cluster_command(tmp_path: Path) -> None:
    # few logs for __consumer_offsets; its RF is the default
    launcher = _Launcher(
        tmp_path, "--metrics-port", "0", "--override", "offsets.topic.num.partitions=3"
    )
    found, lines = launcher.found, launcher.lines
    try:
        boot = wait_until(lambda: found(r"bootstrap.servers=(\S+)"), 90, what="the cluster")
        zk_connect = found(r"ZooKeeper ready on (\S+)")
        assert zk_connect is not None
        bootstraps = boot[1].split(",")
        assert len(bootstraps) == 3

        with RawClient(bootstraps[0]) as client:
            topic = CreateTopicsRequest.CreatableTopic(
                name="rf3", num_partitions=3, replication_factor=3
            )
            answer = client.request(CreateTopicsRequest(topics=[topic], timeout_ms=15_000), 7)
            assert answer.topics[0].error_code == ErrorCode.NONE, answer.topics[0].error_message
        # a stock admin client finds the controller through Metadata and creates a topic there
        admin = AdminClient({"bootstrap.servers": bootstraps[1]})
        futures = admin.create_topics([NewTopic("by-admin", 2, 3)], request_timeout=20)
        futures["by-admin"].result(timeout=30)
        for address in bootstraps:
            with RawClient(address) as client:
                described = client.request(DescribeClusterRequest(), 1)
            assert sorted(b.broker_id for b in described.brokers) == [1, 2, 3]
            assert described.controller_id in (1, 2, 3)

        # the first group lookup creates __consumer_offsets; answered once its leaders are up
        def coordinator() -> bool:
            with RawClient(bootstraps[0]) as client:
                found = client.request(FindCoordinatorRequest(key="g", key_type=0), 3)
            assert found.error_code in (ErrorCode.NONE, ErrorCode.COORDINATOR_NOT_AVAILABLE)
            return found.error_code == ErrorCode.NONE

        wait_until(coordinator, 30, interval=0.2, what="a group coordinator")

        with zk_session(KazooClient(hosts=zk_connect[1])) as zk:
            data, _ = zk.get(znodes.topic_path("__consumer_offsets"))
            offsets = znodes.TopicAssignment.decode(data)
            assert len(offsets.partitions) == 3
            assert all(sorted(r) == [1, 2, 3] for r in offsets.partitions.values())
            for topic, partitions in (("rf3", 3), ("by-admin", 2)):
                for p in range(partitions):
                    data, _ = zk.get(znodes.partition_state_path(topic, p))
                    state = znodes.PartitionState.decode(data)
                    assert state.leader in (1, 2, 3) and sorted(state.isr) == [1, 2, 3]
        # each broker's /metrics: one active controller, every partition led once, none lagging
        # (rf3's 3, by-admin's 2 and __consumer_offsets' 3, each on every broker)
        metrics = found(r"metrics: (.+)$")
        assert metrics is not None
        urls = metrics[1].split()
        assert len(urls) == 3

        def settled() -> bool:  # until every broker has applied its LeaderAndIsr
            scrapes = [scrape(url) for url in urls]

            def total(name: str) -> float:
                return sum(value(s, name) for s in scrapes)

            return (
                total("kafka_controller_kafkacontroller_activecontrollercount") == 1
                and total("kafka_controller_kafkacontroller_globalpartitioncount") == 8
                and total("kafka_controller_kafkacontroller_offlinepartitionscount") == 0
                and total("kafka_server_replicamanager_leadercount") == 8
                and all(
                    value(s, "kafka_server_replicamanager_partitioncount") == 8 for s in scrapes
                )
                and total("kafka_server_replicamanager_underreplicatedpartitions") == 0
            )

        wait_until(settled, 20, interval=0.2, what="the brokers' metrics")
        # the controller's state changes, and LeaderAndIsr to each broker, are in the logs
        wait_until(lambda: found(r"rf3-2: leader \d, leader epoch 0"), 10, what="state log")
        for broker_id in (1, 2, 3):
            wait_until(
                lambda b=broker_id: found(rf"LeaderAndIsr to broker {b}: .*rf3-0"),
                10,
                what=f"LeaderAndIsr to broker {broker_id}",
            )
    finally:
        code = launcher.interrupt()
    assert code == 0, "\n".join(lines[-40:])
    assert any("stopping: brokers one at a time" in line for line in lines)
    assert sum("stopped (0)" in line for line in lines) == 3, "\n".join(lines[-40:])
    for address in bootstraps:
        with pytest.raises(OSError):
            socket.create_connection(host_port(address), timeout=1).close()


def _child_pid(parent: int, marker: str) -> int:
    """The pid of `parent`'s child process whose command line contains `marker`."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and marker in cmdline:
            return int(entry.name)
    raise AssertionError(f"no child of {parent} runs {marker!r}")


def test_a_broker_exiting_leaves_the_others_running(tmp_path: Path) -> None:
    # a killed broker's registration goes soon; two listeners on free ports, the command that
    # starts the broker again gives it both, on the ports it had
    launcher = _Launcher(
        tmp_path,
        "--listeners",
        "PLAINTEXT://127.0.0.1:0,CLIENT://127.0.0.1:0",
        "--override",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CLIENT:PLAINTEXT",
        "--override",
        "zookeeper.session.timeout.ms=6000",
    )
    found, lines, proc = launcher.found, launcher.lines, launcher.proc
    restarted: subprocess.Popen[bytes] | None = None

    def brokers(address: str) -> list[int]:
        with RawClient(address) as client:
            return sorted(b.broker_id for b in client.request(DescribeClusterRequest(), 1).brokers)

    try:
        boot = wait_until(lambda: found(r"bootstrap.servers=(\S+)"), 90, what="the cluster")
        one, two, _three = boot[1].split(",")
        clients = found(r"CLIENT: bootstrap.servers=(\S+)")
        assert clients is not None
        client_one, client_two, _ = clients[1].split(",")
        assert {client_one, client_two}.isdisjoint({one, two})
        os.kill(_child_pid(proc.pid, "broker.id=2"), signal.SIGKILL)
        command = wait_until(
            lambda: found(r"broker 2 exited \(-9\)") and found(r"cluster  \|   (.+serve .+)$"),
            30,
            what="the report of broker 2's exit",
        )
        assert "broker.id=2" in command[1]
        assert f"PLAINTEXT://{two},CLIENT://{client_two}" in command[1]
        assert proc.poll() is None  # the launcher and the other brokers go on
        wait_until(lambda: brokers(one) == [1, 3], 60, interval=0.2, what="broker 2 gone")
        restarted = subprocess.Popen(
            shlex.split(command[1]), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_until(lambda: brokers(one) == [1, 2, 3], 60, interval=0.2, what="broker 2 back")
        # (broker 2 serves before the controller's first UpdateMetadata reaches it, as Kafka's)
        wait_until(lambda: brokers(two) == [1, 2, 3], 30, interval=0.2, what="broker 2 told")
        assert brokers(client_two) == [1, 2, 3]  # its CLIENT listener too, on its old port
    finally:
        if restarted is not None:
            restarted.send_signal(signal.SIGTERM)
            restarted.wait(60)
        code = launcher.interrupt()
    assert code == 0, "\n".join(lines[-40:])
    assert sum("stopped (0)" in line for line in lines) == 2, "\n".join(lines[-40:])
