"""``docker-compose.yml``, exercised: ``up`` of the default profile (ZooKeeper, Kafka 3.9,
wirebroker) and of ``cluster`` (plus three wirebroker brokers), a client round trip through each
broker, then ``down``. Ports are moved to free ones through the file's variables, and the project
name is this test's own, so nothing collides with a broker already running here."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 120.0


def compose_command() -> list[str]:
    """The v2 plugin when the docker CLI has it, else Debian's ``docker-compose``."""
    plugin = subprocess.run(["docker", "compose", "version"], capture_output=True)
    if plugin.returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.skip("neither `docker compose` nor `docker-compose` is installed (make image adds it)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def compose_up(*profiles: str) -> Iterator[dict[str, int]]:
    ports = {
        name: _free_port()
        for name in ("ZOOKEEPER_PORT", "KAFKA_PORT", "WIREBROKER_PORT")
        + tuple(f"WB_{i}_PORT" for i in (1, 2, 3))
    }
    env = {**os.environ, **{k: str(v) for k, v in ports.items()}}
    base = [*compose_command(), "-f", str(ROOT / "docker-compose.yml")]
    base += ["-p", f"wbtest{uuid.uuid4().hex[:8]}"]
    for profile in profiles:
        base += ["--profile", profile]
    subprocess.run([*base, "up", "-d"], env=env, check=True, capture_output=True, timeout=300)
    try:
        yield ports
    except BaseException:
        logs = subprocess.run([*base, "logs", "--tail", "40"], env=env, capture_output=True)
        print(logs.stdout.decode(errors="replace")[-8000:])
        raise
    finally:
        subprocess.run([*base, "down", "-v"], env=env, check=True, capture_output=True, timeout=300)


def wait_for_brokers(bootstrap: str, count: int) -> None:
    """Until Metadata lists ``count`` brokers and a controller (containers start in any order)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            meta = admin.list_topics(timeout=5)
            if len(meta.brokers) == count and meta.controller_id >= 0:
                return
        except KafkaException:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{bootstrap} did not list {count} brokers in {READY_TIMEOUT_S} s")
        time.sleep(0.5)  # a container's port answers before its broker does: nothing to await


def round_trip(bootstrap: str, replication_factor: int) -> None:
    topic = f"compose-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, replication_factor)])[topic].result(timeout=60)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    sent = [f"{bootstrap}-{i}".encode() for i in range(10)]
    for value in sent:
        producer.produce(topic, value)
    assert producer.flush(60) == 0
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest"}
    )
    try:
        consumer.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(got) < len(sent) and time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        assert sorted(got) == sorted(sent)
    finally:
        consumer.close()


def test_default_profile() -> None:
    with compose_up() as ports:
        for name in ("KAFKA_PORT", "WIREBROKER_PORT"):
            bootstrap = f"127.0.0.1:{ports[name]}"
            wait_for_brokers(bootstrap, 1)
            round_trip(bootstrap, 1)


@pytest.mark.timeout(480)
def test_cluster_profile() -> None:
    with compose_up("cluster") as ports:
        bootstrap = ",".join(f"127.0.0.1:{ports[f'WB_{i}_PORT']}" for i in (1, 2, 3))
        wait_for_brokers(bootstrap, 3)
        round_trip(bootstrap, 3)
        wait_for_brokers(f"127.0.0.1:{ports['WIREBROKER_PORT']}", 1)
