"""ACLs on an embedded broker, with Kafka's own kafka-acls and real clients logging in with SASL/PLAIN.

The broker has a PLAINTEXT and a SASL_PLAINTEXT listener, the ACL authorizer and `admin` as its
super user; alice and bob are ordinary users. The tests add, list and remove ACLs with Kafka's
kafka-acls (through the broker, `--bootstrap-server`), then check that confluent-kafka and the
Java client (Kafka's console tools) are allowed and refused as the ACLs say, with Kafka's
error codes; that the ACLs survive a restart; that the controller's requests are refused to
everyone (the embedded broker has no peers) and change nothing; that denials are logged
without secrets; and that without an authorizer the ACL APIs answer SECURITY_DISABLED.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from compat.clients import CONSOLE_CONSUMER, CONSOLE_PRODUCER, TOPIC_COMMAND, java
from protocol.errors import ErrorCode
from protocol.messages.alter_partition import AlterPartitionRequest
from protocol.messages.alter_replica_log_dirs import AlterReplicaLogDirsRequest
from protocol.messages.controlled_shutdown import ControlledShutdownRequest
from protocol.messages.create_acls import CreateAclsRequest
from protocol.messages.delete_acls import DeleteAclsRequest
from protocol.messages.describe_acls import DescribeAclsRequest
from protocol.messages.describe_log_dirs import DescribeLogDirsRequest
from protocol.messages.leader_and_isr import LeaderAndIsrRequest
from protocol.messages.metadata import MetadataRequest
from protocol.messages.stop_replica import StopReplicaRequest
from protocol.messages.update_metadata import UpdateMetadataRequest
from tests.broker_process import BrokerProcess, broker_process
from tests.wirebroker.helpers import RawClient, create_topic
from tests.wirebroker.secured import (
    ALLOW,
    CLUSTER,
    DESCRIBE,
    GROUP,
    PASSWORDS,
    READ,
    TOPIC,
    WRITE,
    acl,
    client_config,
    command_config,
    create_topics,
    embedded_properties,
    grant,
    kafka_acls,
    login,
    sasl,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

TIMEOUT = 20.0
BROKER_PROPERTIES = embedded_properties()


def names(tmp: str) -> tuple[str, str, str]:
    """Three fresh topic names: one alice may use, one she may not, and a group."""
    return f"granted-{tmp}", f"secret-{tmp}", f"app-{tmp}"


def alice_may_use_one_topic(broker: BrokerProcess, tag: str) -> tuple[str, str, str]:
    """Two topics and a group; alice may write and read the first and read with the group."""
    granted, secret, group = names(tag)
    create_topics(sasl(broker), granted, secret)
    grant(
        sasl(broker),
        acl(TOPIC, granted, "User:alice", WRITE),
        acl(TOPIC, granted, "User:alice", READ),
        acl(GROUP, group, "User:alice", READ),
    )
    return granted, secret, group


@pytest.fixture
def tag() -> str:
    return uuid.uuid4().hex[:8]


def test_kafka_acls_adds_lists_and_removes_acls(
    broker: BrokerProcess, tmp_path: Path, tag: str
) -> None:
    admin = command_config(tmp_path, "admin")
    topic, _, group = names(tag)
    kafka_acls(
        sasl(broker), admin, "--add", "--allow-principal", "User:alice",
        "--operation", "Read", "--operation", "Describe", "--topic", topic, "--group", group,
    )  # fmt: skip
    kafka_acls(
        sasl(broker), admin, "--add", "--allow-principal", "User:alice", "--operation", "Write",
        "--topic", f"logs-{tag}-", "--resource-pattern-type", "prefixed",
    )  # fmt: skip
    kafka_acls(
        sasl(broker),
        admin,
        "--add",
        "--deny-principal",
        "User:bob",
        "--operation",
        "All",
        "--topic",
        topic,
    )
    listed = kafka_acls(sasl(broker), admin, "--list", "--topic", topic)
    assert f"resourceType=TOPIC, name={topic}, patternType=LITERAL" in listed
    for line in (
        "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)",
        "(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)",
        "(principal=User:bob, host=*, operation=ALL, permissionType=DENY)",
    ):
        assert line in listed, listed
    prefixed = kafka_acls(
        sasl(broker),
        admin,
        "--list",
        "--topic",
        f"logs-{tag}-",
        "--resource-pattern-type",
        "prefixed",
    )
    assert "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)" in prefixed
    # what applies to one topic: the MATCH filter finds the prefixed ACL too
    matching = kafka_acls(
        sasl(broker),
        admin,
        "--list",
        "--topic",
        f"logs-{tag}-x",
        "--resource-pattern-type",
        "match",
    )
    assert f"name=logs-{tag}-, patternType=PREFIXED" in matching

    kafka_acls(
        sasl(broker), admin, "--remove", "--force", "--allow-principal", "User:alice",
        "--operation", "Read", "--topic", topic,
    )  # fmt: skip
    listed = kafka_acls(sasl(broker), admin, "--list", "--topic", topic)
    assert "operation=READ" not in listed and "operation=DESCRIBE" in listed

    # a restart keeps them (the embedded broker's acls.json)
    broker.restart()
    listed = kafka_acls(sasl(broker), admin, "--list", "--group", group)
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in listed
    # alice may not change ACLs: ALTER on the cluster is needed
    refused = java(
        "kafka.admin.AclCommand", "--bootstrap-server", sasl(broker), "--command-config",
        str(command_config(tmp_path, "alice")), "--add", "--allow-principal", "User:alice",
        "--operation", "All", "--topic", "*", check=False,
    )  # fmt: skip
    assert "ClusterAuthorizationException" in refused, refused


def test_confluent_clients_are_allowed_and_refused_as_the_acls_say(
    broker: BrokerProcess, tag: str
) -> None:
    granted, secret, group = alice_may_use_one_topic(broker, tag)
    alice = client_config(sasl(broker), "alice")

    # Metadata: the topic alice may not describe is not there at all
    topics = AdminClient(alice).list_topics(timeout=TIMEOUT).topics
    assert granted in topics and secret not in topics

    # produce: allowed to one topic (idempotent: WRITE on a topic is enough), refused to the other
    delivered: list[Any] = []
    producer = Producer({**alice, "enable.idempotence": True, "linger.ms": 0})
    for t in (granted, secret):
        producer.produce(t, b"v", on_delivery=lambda err, msg: delivered.append((msg.topic(), err)))
    assert producer.flush(TIMEOUT) == 0
    outcome = {t: (err.code() if err else None) for t, err in delivered}
    assert outcome == {granted: None, secret: KafkaError.TOPIC_AUTHORIZATION_FAILED}

    # consume with the group alice may read; another group is refused
    consumer = Consumer({**alice, "group.id": group, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([granted])
        msg = _poll_one(consumer)
        assert msg.error() is None and msg.value() == b"v"
        consumer.commit(msg, asynchronous=False)
    finally:
        consumer.close()
    errors: list[KafkaError] = []
    other = Consumer({**alice, "group.id": f"other-{tag}", "error_cb": errors.append})
    try:
        other.subscribe([granted])
        msg = _poll_one(other, until_error=True)
        codes = [e.code() for e in errors] + ([msg.error().code()] if msg.error() else [])
        assert KafkaError.GROUP_AUTHORIZATION_FAILED in codes, codes
    finally:
        other.close()

    # admin: alice may not create topics (no CREATE on the cluster or the topic)
    admin = AdminClient(alice)  # kept: its futures fail once it is collected
    futures = admin.create_topics([NewTopic(f"new-{tag}", 1, 1)])
    with pytest.raises(KafkaException) as raised:
        futures[f"new-{tag}"].result(TIMEOUT)
    assert raised.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    # bob has no ACL at all: an idempotent producer cannot even get an id
    fatal: list[KafkaError] = []
    bob = Producer(
        {**client_config(sasl(broker), "bob"), "enable.idempotence": True, "error_cb": fatal.append}
    )
    bob.produce(granted, b"no")
    for _ in range(int(TIMEOUT / 0.2)):
        if KafkaError.CLUSTER_AUTHORIZATION_FAILED in [e.code() for e in fatal]:
            break
        try:
            bob.poll(0.2)
        except KafkaException as e:  # the producer is fatally failed: it says why
            fatal.append(e.args[0])
    assert KafkaError.CLUSTER_AUTHORIZATION_FAILED in [e.code() for e in fatal], fatal


def _poll_one(consumer: Consumer, until_error: bool = False) -> Any:
    for _ in range(int(TIMEOUT / 0.2)):
        msg = consumer.poll(0.2)
        if msg is not None and (until_error or msg.error() is None):
            return msg
    raise AssertionError("no message within the timeout")


def test_java_clients_are_allowed_and_refused(
    broker: BrokerProcess, tmp_path: Path, tag: str
) -> None:
    granted, secret, group = alice_may_use_one_topic(broker, tag)
    alice = str(command_config(tmp_path, "alice"))
    java(CONSOLE_PRODUCER, "--bootstrap-server", sasl(broker), "--producer.config", alice,
         "--topic", granted, input=b"one\ntwo\n")  # fmt: skip
    consumed = java(
        CONSOLE_CONSUMER, "--bootstrap-server", sasl(broker), "--consumer.config", alice,
        "--topic", granted, "--group", group, "--from-beginning", "--max-messages", "2",
        "--timeout-ms", "30000",
    )  # fmt: skip
    assert consumed.split() == ["one", "two"]
    refused = java(
        CONSOLE_PRODUCER, "--bootstrap-server", sasl(broker), "--producer.config", alice,
        "--topic", secret, "--request-required-acks", "1", input=b"x\n", check=False,
    )  # fmt: skip
    assert f"Not authorized to access topics: [{secret}]" in refused, refused
    listed = java(
        TOPIC_COMMAND, "--bootstrap-server", sasl(broker), "--command-config", alice, "--list"
    )
    assert granted in listed.split() and secret not in listed.split()


def test_refusals_carry_kafkas_codes_and_are_logged_without_secrets(
    broker: BrokerProcess, tag: str
) -> None:
    granted, secret, _ = names(tag)
    create_topics(sasl(broker), granted, secret)
    grant(sasl(broker), acl(TOPIC, granted, "User:bob", DESCRIBE))
    since = len(broker.log)
    with RawClient(sasl(broker), plain=login("bob")) as bob:
        listed = bob.request(MetadataRequest(topics=None), 12)
        assert [t.name for t in listed.topics] == [granted]

        def operations(
            topics: list[str] | None, version: int, asked: bool = False
        ) -> list[tuple[str | None, int]]:
            request = MetadataRequest(
                topics=None
                if topics is None
                else [MetadataRequest.MetadataRequestTopic(name=n) for n in topics],
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=asked,
            )
            answer = bob.request(request, version)
            return [(t.name, t.topic_authorized_operations) for t in answer.topics]

        # a topic's encoding kept by an answer without operations is not told to one that asks
        # for them
        assert operations([granted], 10) == [(granted, -(2**31))]
        assert operations(None, 12, asked=True) == [(granted, 1 << DESCRIBE)]
        named = bob.request(
            MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in (granted, secret)],
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=True,
            ),
            10,
        )
        answers = {t.name: (t.error_code, t.topic_authorized_operations) for t in named.topics}
        assert answers == {
            granted: (ErrorCode.NONE, 1 << DESCRIBE),
            secret: (ErrorCode.TOPIC_AUTHORIZATION_FAILED, -(2**31)),
        }
        # answers share a topic's description and encodings: bob's operations are not told to
        # a request that did not ask for them
        assert operations([granted], 10) == [(granted, -(2**31))]
        assert operations(None, 12) == [(granted, -(2**31))]
        # an auto-created topic needs CREATE: bob may describe every name but create none (an
        # internal topic neither, which stays missing)
        grant(sasl(broker), acl(TOPIC, "*", "User:bob", DESCRIBE))
        wanted = [f"auto-{tag}", "__transaction_state"]
        missing = bob.request(
            MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in wanted]),
            4,
        )
        assert [(t.name, t.error_code, t.is_internal) for t in missing.topics] == [
            (f"auto-{tag}", ErrorCode.TOPIC_AUTHORIZATION_FAILED, False),
            ("__transaction_state", ErrorCode.TOPIC_AUTHORIZATION_FAILED, True),
        ]
        described = bob.request(MetadataRequest(topics=None), 12)
        assert "__transaction_state" not in [t.name for t in described.topics]
        acls = bob.request(
            DescribeAclsRequest(
                resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1
            ),
            3,
        )
        assert acls.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        created = bob.request(
            CreateAclsRequest(creations=[acl(CLUSTER, "kafka-cluster", "User:bob", 2)]), 3
        )
        assert [r.error_code for r in created.results] == [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
        # the log dirs, as Kafka's: DescribeLogDirs needs DESCRIBE on the cluster (refused
        # whole, no dir told), AlterReplicaLogDirs ALTER on it (refused per partition)
        described = bob.request(DescribeLogDirsRequest(topics=None), 4)
        assert described.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert described.results == []
        move = AlterReplicaLogDirsRequest(
            dirs=[
                AlterReplicaLogDirsRequest.AlterReplicaLogDir(
                    path=str(broker.data_dir.resolve()),
                    topics=[
                        AlterReplicaLogDirsRequest.AlterReplicaLogDirTopic(name=n, partitions=[0])
                        for n in (granted, secret)
                    ],
                )
            ]
        )
        moved = bob.request(move, 2)
        assert [(t.topic_name, [(p.partition_index, p.error_code) for p in t.partitions])
                for t in moved.results] == [
            (n, [(0, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)]) for n in (granted, secret)
        ]  # fmt: skip
    with RawClient(sasl(broker), plain=login("admin")) as admin:  # a super user may
        described = admin.request(DescribeLogDirsRequest(topics=None), 4)
        assert described.error_code == ErrorCode.NONE
        assert [d.log_dir for d in described.results] == [str(broker.data_dir.resolve())]
        moved = admin.request(move, 2)  # to the dir they are in: nothing to do
        assert {p.error_code for t in moved.results for p in t.partitions} == {ErrorCode.NONE}
    line = broker.wait_for_log(f"on resource = Topic:LITERAL:{secret}", since=since)
    assert line is not None and "Principal = User:bob is Denied Operation = Describe" in line
    assert "from host = 127.0.0.1" in line and "for request = Metadata" in line
    assert not [line for line in broker.log for pw in PASSWORDS.values() if pw in line]
    # the PLAINTEXT listener's ANONYMOUS is no one special: it sees no topic
    with RawClient(f"127.0.0.1:{broker.ports['PLAINTEXT']}") as anonymous:
        assert anonymous.request(MetadataRequest(topics=None), 12).topics == []


def test_controller_requests_are_refused_and_change_nothing(
    broker: BrokerProcess, tag: str
) -> None:
    granted, _, _ = names(tag)
    create_topics(sasl(broker), granted)
    refused = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    requests = [
        (LeaderAndIsrRequest(controller_id=0, controller_epoch=99, broker_epoch=-1), 7),
        (UpdateMetadataRequest(controller_id=0, controller_epoch=99, broker_epoch=-1), 8),
        (
            StopReplicaRequest(
                controller_id=0,
                controller_epoch=99,
                broker_epoch=-1,
                topics=[StopReplicaRequest.StopReplicaTopicV1(name=granted, partition_indexes=[0])],
                delete_partitions=True,
            ),
            1,
        ),
        (ControlledShutdownRequest(broker_id=0, broker_epoch=-1), 3),
        (AlterPartitionRequest(broker_id=0, broker_epoch=-1), 3),
    ]
    # even the super user, on either listener: the embedded broker has no peers
    for client in (
        RawClient(sasl(broker), plain=login("admin")),
        RawClient(f"127.0.0.1:{broker.ports['PLAINTEXT']}"),
    ):
        with client:
            for body, version in requests:
                assert client.request(body, version).error_code == refused, type(body).__name__
    with RawClient(sasl(broker), plain=login("admin")) as admin:
        (t,) = admin.request(
            MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=granted)]), 12
        ).topics
    assert t.error_code == ErrorCode.NONE and [p.leader_id for p in t.partitions] == [0]


def test_without_an_authorizer_the_acl_apis_are_disabled(tmp_path: Path) -> None:
    with broker_process(tmp_path) as plain:
        topic = f"open-{uuid.uuid4().hex[:6]}"
        create_topic(plain.bootstrap, topic)  # everyone may do everything, as Kafka
        with RawClient(plain.bootstrap) as client:
            described = client.request(
                DescribeAclsRequest(
                    resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1
                ),
                3,
            )
            assert described.error_code == ErrorCode.SECURITY_DISABLED
            created = client.request(
                CreateAclsRequest(creations=[acl(TOPIC, topic, "User:x", READ, ALLOW)]), 3
            )
            assert [r.error_code for r in created.results] == [ErrorCode.SECURITY_DISABLED]
            deleted = client.request(
                DeleteAclsRequest(
                    filters=[
                        DeleteAclsRequest.DeleteAclsFilter(
                            resource_type_filter=1,
                            pattern_type_filter=1,
                            operation=1,
                            permission_type=1,
                        )
                    ]
                ),
                3,
            )
            assert [r.error_code for r in deleted.filter_results] == [ErrorCode.SECURITY_DISABLED]
