"""``WirebrokerContainer`` and ``ApacheKafkaContainer`` with real clients: the mapped port is what
the broker advertises, configs reach the broker, and the container is gone after ``with``; the
image runs the host's mypyc build of the record path (``make image`` gives it)."""

from __future__ import annotations

import re
import uuid

import docker
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

from tests.wirebroker.helpers import round_trip_confluent
from wirebroker.broker_probe import metadata_brokers
from wirebroker.compiled import BUILD_DIR, SOURCE_ROOT, CompiledFinder
from wirebroker.testcontainers import ApacheKafkaContainer, WirebrokerContainer, env_to_config


def _advertised(bootstrap: str) -> set[str]:
    brokers = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).brokers
    return {f"{b.host}:{b.port}" for b in brokers.values()}


@pytest.mark.parametrize("container", [WirebrokerContainer, ApacheKafkaContainer])
def test_round_trip_on_the_mapped_port(container: type[WirebrokerContainer]) -> None:
    topic = f"t-{uuid.uuid4().hex[:8]}"
    with container() as broker:
        bootstrap = broker.get_bootstrap_server()
        container_id = broker.get_container_id()
        # The broker advertises exactly the address the host dials, so clients stay on it.
        assert _advertised(bootstrap) == {bootstrap}
        assert round_trip_confluent(bootstrap, topic) == [b"m0", b"m1", b"m2"]
    with pytest.raises(docker.errors.NotFound):
        docker.from_env().containers.get(container_id)


class _KafkaReadyAtRegistration(ApacheKafkaContainer):
    """Kafka taken as ready at its ZooKeeper registration, a second before it accepts requests:
    its real window ("started" logged, its controller's UpdateMetadata not yet in) lasts tens
    of ms and testcontainers reads the log about once a second, so a test of the real one
    passes by luck; this one makes the window certain."""

    ready = re.compile(r"Registered broker \d+ at path")


@pytest.mark.parametrize(
    "container", [WirebrokerContainer, ApacheKafkaContainer, _KafkaReadyAtRegistration]
)
def test_start_returns_once_metadata_lists_the_broker(container: type[WirebrokerContainer]) -> None:
    """Once `start()` returns, with no retry: Metadata lists the broker at the mapped address
    and a controller, and CreateTopics with replication factor 1 succeeds (Kafka 3.9 logs
    "started" before its controller's UpdateMetadata reached it; until then it lists no broker
    and refuses: "Replication factor: 1 larger than available brokers: 0"), whatever log line
    the container waits for first."""
    with container() as broker:
        bootstrap = broker.get_bootstrap_server()
        host, port = bootstrap.rsplit(":", 1)
        brokers, controller = metadata_brokers(host, int(port))
        assert (host, int(port)) in brokers.values()
        assert controller in brokers
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topic = f"t-{uuid.uuid4().hex[:8]}"
        created = admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=30)
        assert created[topic].result(timeout=30) is None


def test_the_image_runs_the_compiled_record_path() -> None:
    host = CompiledFinder(BUILD_DIR, SOURCE_ROOT)
    if not host.usable():
        pytest.skip(f"the host has no compiled build to give the image: {host.refusal}")
    with WirebrokerContainer() as broker:
        stdout, stderr = broker.get_logs()
    log = (stdout + stderr).decode()
    expected = "record path and codec primitives: compiled with mypyc (protocol.varint"
    assert expected in log, f"rebuilt with `make image` since the build? The broker's log:\n{log}"


def test_configs_reach_the_broker() -> None:
    container = (
        WirebrokerContainer(overrides={"default.replication.factor": 1})
        .with_env("KAFKA_NUM_PARTITIONS", "3")
        .with_override("log.retention.ms", 3_600_000)
    )
    with container as broker:
        bootstrap = broker.get_bootstrap_server()
        producer = KafkaProducer(bootstrap_servers=bootstrap)
        producer.send("auto", b"x").get(timeout=30)  # auto-created: num.partitions applies
        producer.close()
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            (described,) = admin.describe_topics(["auto"])
            assert len(described["partitions"]) == 3
        finally:
            admin.close()
        consumer = KafkaConsumer(
            "auto",
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            consumer_timeout_ms=30_000,
        )
        assert next(consumer).value == b"x"
        consumer.close()
        client = AdminClient({"bootstrap.servers": bootstrap})
        (broker_id,) = client.list_topics(timeout=30).brokers
        resource = ConfigResource(ResourceType.BROKER, str(broker_id))
        configs = client.describe_configs([resource])[resource].result(timeout=30)
        assert configs["log.retention.ms"].value == "3600000"


def test_env_to_config() -> None:
    assert env_to_config("KAFKA_LOG_RETENTION_MS") == "log.retention.ms"
    assert env_to_config("KAFKA_LISTENER_NAME_SASL__SSL_X") == "listener.name.sasl_ssl.x"
    assert env_to_config("KAFKA_A___B") == "a-b"
