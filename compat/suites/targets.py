"""The brokers every suite runs against, each started fresh for one suite's run.

``kafka``: Apache Kafka 3.9, one broker (``compat.kafka_process.kafka_reference``: a container of
the local image when Docker works, else the jars). ``wirebroker``: one broker process.
``kafka-cluster``: ZooKeeper and three Kafka 3.9 brokers from the jars, the reference of
``wirebroker-cluster``: ``wirebroker cluster --brokers 3`` (ZooKeeper from the jars). The same
broker settings go to all; the clusters keep Kafka's replication defaults (3 replicas, offsets
and transaction logs included). ``replication_factor`` is what tests should create topics with.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from compat.kafka_process import kafka_broker, kafka_reference, zookeeper
from compat.suites.results import BUILD
from tests.broker_process import BrokerProcess

_BOOTSTRAP = re.compile(r"bootstrap\.servers=(\S+)")
CLUSTER_START_TIMEOUT = 120.0
LOGS = BUILD / "logs"


@dataclass(frozen=True)
class Target:
    name: str
    bootstrap: str
    replication_factor: int
    how: str


@contextlib.contextmanager
def start(name: str, settings: Mapping[str, str]) -> Iterator[Target]:
    """Run target ``name`` with broker ``settings`` until the block exits."""
    if name == "kafka":
        with kafka_reference(overrides=settings) as kafka:
            yield Target(name, kafka.bootstrap_servers, 1, f"Apache Kafka 3.9 {kafka.how}")
    elif name == "wirebroker":
        with tempfile.TemporaryDirectory(prefix="wb-suite-") as data:
            broker = BrokerProcess(Path(data), dict(settings))
            broker.start(timeout=60)
            try:
                yield Target(name, broker.bootstrap, 1, "one `wirebroker serve` process")
            finally:
                broker.stop()
    elif name == "kafka-cluster":
        with _kafka_cluster(settings) as bootstrap:
            yield Target(name, bootstrap, 3, "ZooKeeper + 3 Apache Kafka 3.9 brokers from the jars")
    elif name == "wirebroker-cluster":
        with _cluster(settings) as bootstrap:
            yield Target(
                name, bootstrap, 3, "`wirebroker cluster --brokers 3` (ZooKeeper from the jars)"
            )
    else:
        raise ValueError(f"unknown target {name}")


#: Kafka's own defaults for a cluster, over ``kafka_properties``' single-broker ones.
CLUSTER_REPLICATION = {
    "default.replication.factor": "3",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
}


@contextlib.contextmanager
def _kafka_cluster(settings: Mapping[str, str]) -> Iterator[str]:
    overrides = {**CLUSTER_REPLICATION, **settings}
    with contextlib.ExitStack() as stack:
        zk = stack.enter_context(zookeeper())
        brokers = [
            stack.enter_context(kafka_broker(zk.connect, broker_id=i, overrides=overrides))
            for i in (1, 2, 3)
        ]
        yield ",".join(b.bootstrap_servers for b in brokers)


@contextlib.contextmanager
def _cluster(settings: Mapping[str, str]) -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="wb-suite-cluster-") as data:
        argv = [sys.executable, "-m", "wirebroker", "cluster", "--brokers", "3"]
        argv += ["--zookeeper-port", "0", "--base-port", "0", "--data-dir", data]
        for key, value in {"default.replication.factor": "3", **settings}.items():
            argv += ["--override", f"{key}={value}"]
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        found: list[str] = []
        ready = threading.Event()
        log = LOGS / "wirebroker-cluster.log"
        log.parent.mkdir(parents=True, exist_ok=True)

        def pump() -> None:
            assert proc.stdout is not None
            with log.open("w") as out:
                for line in proc.stdout:
                    out.write(line)
                    match = _BOOTSTRAP.search(line)
                    if match and not found:
                        found.append(match.group(1))
                        ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        try:
            if not ready.wait(CLUSTER_START_TIMEOUT) or not found:
                raise RuntimeError(f"wirebroker cluster did not start: see {log}")
            yield found[0]
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
