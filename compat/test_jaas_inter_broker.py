"""SCRAM between brokers whose username and password come from the JAAS file's PlainLoginModule
(or ZooKeeper's DigestLoginModule), on two real Kafka 3.9 brokers and on two wirebroker brokers:
both replicate.

Kafka's brokers log in to each other with the inter-broker listener's JAAS context for
`sasl.mechanism.inter.broker.protocol`; its SCRAM client's callback handler
(SaslClientCallbackHandler) takes the username and password from the Subject that login filled,
where PlainLoginModule puts its `username` and `password` as ScramLoginModule does. Here the
`KafkaServer` section's PlainLoginModule has them and its ScramLoginModule (which registers
Kafka's SCRAM client and server when it loads) has none; or both have them, and the Subject's
credentials are each the one a Java HashSet of them yields first: `admin` and its password,
the second module's; or ZooKeeper's DigestLoginModule (on Kafka's classpath) has them in
PlainLoginModule's place, and puts them in the Subject as it does. Only the user the login is
expected to take has a SCRAM-SHA-512 credential, written to ZooKeeper by Kafka's ConfigCommand
before the brokers start. A topic of two replicas with `min.insync.replicas=2` takes records
with acks=all only once the follower fetched them over the SASL listener.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from compat.kafka_process import free_port, kafka_broker, zookeeper
from tests.broker_process import BrokerProcess, serving
from tests.cluster.processes import zk_session
from wirebroker.zookeeper_server import ZooKeeperServer, jars_available, java_command

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not jars_available(), reason="no Kafka jars: run `make jars`"),
]

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
DIGEST = "org.apache.zookeeper.server.auth.DigestLoginModule"
SECRET = "broker-secret-51c3"
ADMIN_SECRET = "admin-secret-9e07"
BROKER = f'{PLAIN} required username="broker" password="{SECRET}";'
PLAIN_ONLY = f"{BROKER} {SCRAM} required;"
DIGEST_ONLY = f'{DIGEST} required username="broker" password="{SECRET}"; {SCRAM} required;'
BOTH = f'{BROKER} {SCRAM} required username="admin" password="{ADMIN_SECRET}";'
SETTINGS = {
    "inter.broker.listener.name": "SASL_PLAINTEXT",
    "sasl.enabled.mechanisms": "SCRAM-SHA-512",
    "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
}


@pytest.fixture(scope="module")
def zk() -> Iterator[ZooKeeperServer]:
    with zookeeper() as server:
        yield server


@pytest.fixture(
    params=[
        (PLAIN_ONLY, "broker", SECRET),
        (BOTH, "admin", ADMIN_SECRET),
        (DIGEST_ONLY, "broker", SECRET),
    ],
    ids=["plain-module", "both-modules", "zookeeper-digest-module"],
)
def case(request: pytest.FixtureRequest) -> tuple[str, str, str]:
    """The `KafkaServer` section's login modules, and the user and password the brokers'
    login takes from them."""
    return request.param


@pytest.fixture
def zk_connect(zk: ZooKeeperServer, case: tuple[str, str, str]) -> str:
    """A chroot of this test's own, holding the SCRAM credential of the brokers' user."""
    _section, user, password = case
    connect = f"{zk.connect}/wb-{uuid.uuid4().hex[:8]}"
    with zk_session(KazooClient(hosts=zk.connect), 30) as client:
        client.ensure_path(connect.split("/", 1)[1])
    argv = java_command(
        "kafka.admin.ConfigCommand",
        ["--zookeeper", connect, "--alter", "--entity-type", "users", "--entity-name", user]
        + ["--add-config", f"SCRAM-SHA-512=[password={password}]"],
        heap="256m",
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return connect


@pytest.fixture
def jvm_options(tmp_path: Path, case: tuple[str, str, str]) -> list[str]:
    path = tmp_path / "kafka_server_jaas.conf"
    path.write_text(f"KafkaServer {{ {case[0]} }};\n")
    return [f"-Djava.security.auth.login.config={path}"]


def replicates(bootstrap: str) -> None:
    """A topic of two replicas (min.insync.replicas=2) takes 5 records with acks=all."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = NewTopic("replicated", 1, 2, config={"min.insync.replicas": "2"})
    admin.create_topics([topic])["replicated"].result(30)
    errors: list[object] = []
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 30000}
    )
    for i in range(5):
        producer.produce("replicated", f"r{i}".encode(), on_delivery=lambda e, _m: errors.append(e))
    assert producer.flush(40) == 0
    assert errors == [None] * 5, errors


def test_kafka_replicates(zk_connect: str, jvm_options: list[str], tmp_path: Path) -> None:
    with ExitStack() as stack:
        plaintext = []
        for broker_id in (1, 2):
            port, sasl = free_port(), free_port()
            listeners = f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl}"
            overrides = {**SETTINGS, "listeners": listeners, "advertised.listeners": listeners}
            stack.enter_context(
                kafka_broker(
                    zk_connect,
                    broker_id=broker_id,
                    port=port,
                    overrides=overrides,
                    jvm_options=jvm_options,
                    workdir=tmp_path / f"kafka-{broker_id}",
                )
            )
            plaintext.append(f"127.0.0.1:{port}")
        replicates(",".join(plaintext))


def test_wirebroker_replicates(
    zk_connect: str, jvm_options: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAFKA_OPTS", " ".join(jvm_options))
    with ExitStack() as stack:
        plaintext = []
        for broker_id in (1, 2):
            props = {
                **SETTINGS,
                "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
                "zookeeper.connect": zk_connect,
                "broker.id": str(broker_id),
            }
            process = BrokerProcess(tmp_path / f"wirebroker-{broker_id}", props)
            stack.enter_context(serving(process))
            plaintext.append(process.bootstrap)
        try:
            replicates(",".join(plaintext))
        except KafkaException as e:  # the brokers' logs say why
            raise AssertionError("\n".join(process.log[-40:])) from e
