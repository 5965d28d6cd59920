"""Client quotas on a broker process: Kafka's kafka-configs, real clients held to their quotas,
the connection muted for the throttle time (KIP-219), request and controller mutation quotas.

The broker samples quotas over two windows of one second (`quota.window.num=2`, a Kafka key):
a client then gets at most one second of its quota at once, so a short run measures its
steady rate. Each test uses client ids of its own, so the tests share the broker.
"""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from compat.kafka_process import jars_available, run_kafka_tool
from protocol.errors import ErrorCode
from protocol.messages.alter_client_quotas import AlterClientQuotasRequest
from protocol.messages.create_topics import CreateTopicsRequest
from protocol.messages.describe_client_quotas import DescribeClientQuotasRequest
from protocol.messages.metadata import MetadataRequest
from protocol.messages.produce import ProduceResponse
from protocol.record_batch import SimpleRecord
from tests.broker_process import BrokerProcess, broker_process
from tests.wirebroker.helpers import RawClient, create_topic, produce_request, scrape, value
from tests.wirebroker.secured import (
    TOPIC,
    acl,
    create_topics,
    grant,
    login,
    secured_properties,
)

pytestmark = pytest.mark.integration

BROKER_PROPERTIES = {
    "quota.window.num": "2",
    "controller.quota.window.num": "2",
    "wirebroker.metrics.listener": "127.0.0.1:0",
}
QUOTA = 200_000  # bytes a second
RUN_S = 8.0
#: A new client gets (quota.window.num - 1) windows of its quota at once, and is then held
#: back about as long: its steady rate is measured after that.
SETTLE_S = 2.0
CONFIG_COMMAND = "kafka.admin.ConfigCommand"
WRITE = 4  # Kafka's AclOperation
A = AlterClientQuotasRequest
D = DescribeClientQuotasRequest
ENDPOINT = re.compile(r"metrics endpoint on (?P<url>http://\S+/metrics)")

needs_jars = pytest.mark.skipif(not jars_available(), reason="no Kafka jars: run `make jars`")


def client_id(stem: str) -> str:
    return f"{stem}-{uuid.uuid4().hex[:6]}"


def alter(bootstrap: str, *entity: str, add: str = "", delete: str = "") -> None:
    """`kafka-configs --alter` of a client quota entity, through Kafka's own tool."""
    args = ["--bootstrap-server", bootstrap, "--alter", *entity]
    args += ["--add-config", add] if add else ["--delete-config", delete]
    run_kafka_tool(CONFIG_COMMAND, args)


def describe(bootstrap: str, *entity: str) -> str:
    args = ["--bootstrap-server", bootstrap, "--describe", *entity]
    return run_kafka_tool(CONFIG_COMMAND, args).stdout.decode()


def set_quota(bootstrap: str, client: str, key: str, value: float) -> None:
    request = AlterClientQuotasRequest(
        entries=[
            AlterClientQuotasRequest.EntryData(
                entity=[
                    AlterClientQuotasRequest.EntityData(entity_type="client-id", entity_name=client)
                ],
                ops=[AlterClientQuotasRequest.OpData(key=key, value=value)],
            )
        ]
    )
    with RawClient(bootstrap) as raw:
        answer = raw.request(request, 1)
    assert [e.error_code for e in answer.entries] == [ErrorCode.NONE]


def steady_rate(events: list[tuple[float, int]], end: float) -> float:
    """Bytes a second of (time, bytes) events from SETTLE_S after the first one to `end`."""
    start = events[0][0] + SETTLE_S
    return sum(n for t, n in events if start <= t <= end) / (end - start)


@needs_jars
def test_kafka_configs_sets_and_describes_quotas(broker: BrokerProcess) -> None:
    app, user = client_id("app"), f"user-{uuid.uuid4().hex[:6]}"
    bootstrap = broker.bootstrap
    clients = ("--entity-type", "clients", "--entity-name", app)
    alter(bootstrap, *clients, add="producer_byte_rate=1024,consumer_byte_rate=2048")
    user_default_client = ("--entity-type", "users", "--entity-name", user)
    user_default_client += ("--entity-type", "clients", "--entity-default")
    alter(bootstrap, *user_default_client, add="controller_mutation_rate=10")
    out = describe(bootstrap, "--entity-type", "clients")
    assert (
        f"Quota configs for client-id '{app}' are consumer_byte_rate=2048.0, "
        "producer_byte_rate=1024.0" in out
    )
    out = describe(bootstrap, *user_default_client[:4], "--entity-type", "clients")
    assert (
        f"Quota configs for user-principal '{user}', the default client-id are "
        "controller_mutation_rate=10.0" in out
    )
    # A value of the wrong type is Kafka's error, from the broker.
    args = ["--bootstrap-server", bootstrap, "--alter", *clients]
    failed = run_kafka_tool(
        CONFIG_COMMAND, [*args, "--add-config", "producer_byte_rate=1.5"], check=False
    )
    assert failed.returncode != 0
    assert b"producer_byte_rate must be a LONG value" in failed.stderr + failed.stdout


def test_describe_filters_and_errors(broker: BrokerProcess) -> None:
    app = client_id("filtered")
    set_quota(broker.bootstrap, app, "request_percentage", 25.0)
    R = DescribeClientQuotasRequest
    exact = R.ComponentData(entity_type="client-id", match_type=0, match=app)
    with RawClient(broker.bootstrap) as raw:
        for version in (0, 1):
            answer = raw.request(R(components=[exact], strict=True), version)
            assert answer.error_code == ErrorCode.NONE
            assert [
                (
                    [(e.entity_type, e.entity_name) for e in entry.entity],
                    [(v.key, v.value) for v in entry.values],
                )
                for entry in answer.entries
            ] == [([("client-id", app)], [("request_percentage", 25.0)])]
        # Strict with only a user component: client entities are left out.
        user = R.ComponentData(entity_type="user", match_type=2, match=None)
        answer = raw.request(R(components=[user], strict=True), 1)
        assert all(e.entity[0].entity_type == "user" for e in answer.entries)
        bad = raw.request(R(components=[exact, exact], strict=False), 1)
        assert bad.error_code == ErrorCode.INVALID_REQUEST
        assert bad.error_message == "Duplicate client filter component entity type"
        assert bad.entries is None


def test_alter_answers_each_entry(broker: BrokerProcess) -> None:
    def entry(entity: list[tuple[str, str | None]], key: str, value: float) -> A.EntryData:
        return A.EntryData(
            entity=[A.EntityData(entity_type=t, entity_name=n) for t, n in entity],
            ops=[A.OpData(key=key, value=value)],
        )

    app = client_id("validated")
    request = A(
        entries=[
            entry([("client-id", app)], "producer_byte_rate", 100.0),
            entry([("client-id", "x")], "producer_byte_rate", 100.5),
            entry([("user", "")], "producer_byte_rate", 1.0),
            entry([("client-id", "y")], "SCRAM-SHA-256", 1.0),
            entry([("ip", "127.0.0.1")], "connection_creation_rate", 1.0),
            entry([("ip", "no.such.host")], "connection_creation_rate", 1.0),
            entry([("ip", None)], "connection_creation_rate", 1.5),
            entry([("ip", "127.0.0.2")], "producer_byte_rate", 1.0),
            entry([("client-id", "z")], "producer_byte_rate", 1.5),
            entry([("client-id", "z")], "producer_byte_rate", 2.0),  # the same entity: once
        ],
        validate_only=True,
    )
    with RawClient(broker.bootstrap) as raw:
        answer = raw.request(request, 1)
        assert [
            ([(e.entity_type, e.entity_name) for e in a.entity], a.error_code, a.error_message)
            for a in answer.entries
        ] == [
            ([("client-id", app)], ErrorCode.NONE, None),
            (
                [("client-id", "x")],
                ErrorCode.INVALID_REQUEST,
                "Configuration producer_byte_rate must be a LONG value",
            ),
            ([("user", "")], ErrorCode.INVALID_REQUEST, "Empty user not supported"),
            (
                [("client-id", "y")],
                ErrorCode.INVALID_REQUEST,
                "Invalid configuration key SCRAM-SHA-256",
            ),
            ([("ip", "127.0.0.1")], ErrorCode.NONE, None),
            (
                [("ip", "no.such.host")],
                ErrorCode.INVALID_REQUEST,
                "no.such.host is not a valid IP or resolvable host.",
            ),
            (
                [("ip", None)],
                ErrorCode.INVALID_REQUEST,
                "Configuration connection_creation_rate must be a INT value",
            ),
            (
                [("ip", "127.0.0.2")],
                ErrorCode.INVALID_REQUEST,
                "Invalid configuration key producer_byte_rate",
            ),
            ([("client-id", "z")], ErrorCode.NONE, None),
        ]
        components = [
            DescribeClientQuotasRequest.ComponentData(
                entity_type="client-id", match_type=0, match=app
            )
        ]
        described = raw.request(DescribeClientQuotasRequest(components=components), 1)
        assert described.entries == []  # validate_only changed nothing


def test_a_producer_is_held_to_its_quota(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    producer_id = client_id("held-producer")
    set_quota(broker.bootstrap, producer_id, "producer_byte_rate", QUOTA)
    throttles: list[tuple[float, float]] = []
    acked: list[tuple[float, int]] = []
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "client.id": producer_id,
            "linger.ms": 5,
            "batch.size": 16384,  # requests much smaller than a second's quota
            "queue.buffering.max.kbytes": 256,
            "throttle_cb": lambda ev: throttles.append((time.monotonic(), ev.throttle_time)),
        }
    )

    def delivered(err: object, msg: object) -> None:
        if err is None:
            acked.append((time.monotonic(), 1000))

    started = time.monotonic()
    while time.monotonic() - started < RUN_S:
        try:
            producer.produce(topic, b"x" * 1000, on_delivery=delivered)
        except BufferError:
            producer.poll(0.05)
        producer.poll(0)
    producer.flush(30)
    assert any(t > 0 for _, t in throttles), "no throttle time reached the producer"
    rate = steady_rate(acked, started + RUN_S)
    # Record bytes are most of the request bytes the quota counts.
    assert 0.8 * QUOTA <= rate <= 1.2 * QUOTA, rate


def test_a_consumer_is_held_to_its_quota(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": 16384}
    )
    for _ in range(3000):
        producer.produce(topic, b"y" * 1000)
        producer.poll(0)
    assert producer.flush(30) == 0
    consumer_id = client_id("held-consumer")
    set_quota(broker.bootstrap, consumer_id, "consumer_byte_rate", QUOTA)
    throttles: list[float] = []
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "client.id": consumer_id,
            "group.id": consumer_id,
            "fetch.max.bytes": 16384,
            "max.partition.fetch.bytes": 16384,
            "message.max.bytes": 16384,
            "throttle_cb": lambda ev: throttles.append(ev.throttle_time),
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[tuple[float, int]] = []
        started = time.monotonic()
        while time.monotonic() - started < RUN_S:
            message = consumer.poll(0.1)
            if message is not None and not message.error():
                got.append((time.monotonic(), len(message.value() or b"")))
    finally:
        consumer.close()
    assert any(t > 0 for t in throttles), "no throttle time reached the consumer"
    assert sum(n for _, n in got) < 3_000_000  # not everything at once
    rate = steady_rate(got, started + RUN_S)
    assert 0.8 * QUOTA <= rate <= 1.2 * QUOTA, rate


def test_a_throttled_connection_reads_nothing_for_the_throttle_time(
    broker: BrokerProcess, topic: str
) -> None:
    """KIP-219: the throttled answer comes at once; the next request, already sent, is not
    even read until the throttle time has passed."""
    create_topic(broker.bootstrap, topic)
    producer_id = client_id("muted")
    set_quota(broker.bootstrap, producer_id, "producer_byte_rate", 1000)
    body = produce_request(
        topic, 0, [SimpleRecord(None, b"z" * 5000)]
    )  # 5 KB against 1 KB/s: ~4 s of throttle
    with RawClient(broker.bootstrap, client_id=producer_id) as raw:
        first = raw.send(body, 9)
        second = raw.send(body, 9)  # pipelined behind it
        sent = time.monotonic()
        answer: ProduceResponse = raw.receive(ProduceResponse, 9, first)
        answered = time.monotonic()
        later: ProduceResponse = raw.receive(ProduceResponse, 9, second)
        waited = time.monotonic() - sent
    assert answer.throttle_time_ms > 1000
    assert answered - sent < answer.throttle_time_ms / 1000 / 2  # not delayed itself
    assert waited >= answer.throttle_time_ms / 1000 * 0.9
    assert later.throttle_time_ms > 0  # over its quota again


def test_request_percentage_throttles_any_request(broker: BrokerProcess) -> None:
    busy = client_id("busy")
    set_quota(broker.bootstrap, busy, "request_percentage", 0.01)  # 0.1 ms a second
    with RawClient(broker.bootstrap, client_id=busy) as raw:
        throttles = [
            raw.request(MetadataRequest(topics=None), 12).throttle_time_ms for _ in range(5)
        ]
    assert any(throttles), throttles
    assert max(throttles) <= 1000  # at most one window, as Kafka's request quota


def test_controller_mutations_strict_and_permissive(broker: BrokerProcess, topic: str) -> None:
    admin = client_id("mutator")
    set_quota(broker.bootstrap, admin, "controller_mutation_rate", 1.0)  # a burst of 2

    def create(name: str, partitions: int, version: int) -> tuple[int, int]:
        topics = [
            CreateTopicsRequest.CreatableTopic(
                name=name, num_partitions=partitions, replication_factor=1
            )
        ]
        with RawClient(broker.bootstrap, client_id=admin) as raw:
            answer = raw.request(CreateTopicsRequest(topics=topics, timeout_ms=5000), version)
        return answer.topics[0].error_code, answer.throttle_time_ms

    # The bucket is not empty yet: allowed (and 3 below zero now), as Kafka's strict quota.
    assert create(f"{topic}-a", 5, 7) == (ErrorCode.NONE, 0)
    code, throttle_ms = create(f"{topic}-b", 1, 7)  # strict: refused while below zero
    assert code == ErrorCode.THROTTLING_QUOTA_EXCEEDED and 2000 < throttle_ms <= 3000
    code, throttle_ms = create(f"{topic}-c", 1, 5)  # v5 is permissive: created, throttled
    assert code == ErrorCode.NONE and throttle_ms > 0


def test_throttle_times_are_exported(broker: BrokerProcess, topic: str) -> None:
    line = broker.wait_for_log("metrics endpoint on")
    assert line is not None
    m = ENDPOINT.search(line)
    assert m is not None
    create_topic(broker.bootstrap, topic)
    producer_id = client_id("exported")
    set_quota(broker.bootstrap, producer_id, "producer_byte_rate", 1000)
    with RawClient(broker.bootstrap, client_id=producer_id) as raw:
        answer = raw.request(produce_request(topic, 0, [SimpleRecord(None, b"w" * 3000)]), 9)
    assert answer.throttle_time_ms > 0
    samples = scrape(m["url"])
    labels = {"resource": "Produce", "clientId": producer_id}
    assert value(samples, "kafka_server_quota_throttle_time", **labels) == answer.throttle_time_ms
    assert value(samples, "kafka_server_quota_byte_rate", **labels) > 0


def test_quotas_survive_a_restart(tmp_path: Path) -> None:
    app = client_id("kept")
    with broker_process(tmp_path, {}) as broker:
        set_quota(broker.bootstrap, app, "producer_byte_rate", 4096)
        broker.restart()
        components = [
            DescribeClientQuotasRequest.ComponentData(
                entity_type="client-id", match_type=0, match=app
            )
        ]
        with RawClient(broker.bootstrap) as raw:
            answer = raw.request(DescribeClientQuotasRequest(components=components), 1)
        assert [(v.key, v.value) for v in answer.entries[0].values] == [
            ("producer_byte_rate", 4096.0)
        ]
    assert (tmp_path / "client-quotas.json").exists()


def test_user_quotas_follow_the_sasl_principal_and_need_permissions(tmp_path: Path) -> None:
    """A user's quota applies to the SASL user whatever its client id; the quota APIs need
    ALTER_CONFIGS / DESCRIBE_CONFIGS on the cluster (CLUSTER_AUTHORIZATION_FAILED), as Kafka."""
    properties = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        **secured_properties(),
    }
    with broker_process(tmp_path, properties) as broker:
        bootstrap = f"127.0.0.1:{broker.ports['SASL_PLAINTEXT']}"
        topic = "user-quota"
        create_topics(bootstrap, topic)
        grant(
            bootstrap, acl(TOPIC, topic, "User:alice", WRITE), acl(TOPIC, topic, "User:bob", WRITE)
        )
        alice_quota = A(
            entries=[
                A.EntryData(
                    entity=[A.EntityData(entity_type="user", entity_name="alice")],
                    ops=[A.OpData(key="producer_byte_rate", value=1000.0)],
                )
            ]
        )
        with RawClient(bootstrap, plain=login("bob")) as bob:
            refused = bob.request(alice_quota, 1)
            assert [(e.error_code, e.error_message) for e in refused.entries] == [
                (ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
            ]
            described = bob.request(D(components=[]), 1)
            assert described.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            assert described.entries is None
        with RawClient(bootstrap, plain=login("admin")) as admin:
            assert [e.error_code for e in admin.request(alice_quota, 1).entries] == [0]
        body = produce_request(topic, 0, [SimpleRecord(None, b"u" * 15_000)])
        for user, throttled in (("alice", True), ("bob", False)):
            with RawClient(bootstrap, plain=login(user), client_id=f"{user}-{uuid.uuid4()}") as c:
                answer: ProduceResponse = c.request(body, 9)
            assert answer.responses[0].partition_responses[0].error_code == ErrorCode.NONE
            assert (answer.throttle_time_ms > 2000) is throttled, (user, answer.throttle_time_ms)
