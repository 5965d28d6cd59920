"""The znode codecs: Kafka 3.9's exact JSON (as its ZkData writes it), and round trips."""

from __future__ import annotations

import uuid

import pytest

from wirebroker.zk import znodes as z


def test_cluster_id_is_kafkas_json() -> None:
    node = z.ClusterIdZNode("abcDEF123")
    assert node.encode() == b'{"version":"1","id":"abcDEF123"}'
    assert z.ClusterIdZNode.decode(node.encode()) == node


def test_broker_registration_is_kafkas_json_without_a_rack() -> None:
    reg = z.BrokerRegistration(1, (z.Endpoint("PLAINTEXT", "h1", 9092),), None, 1700000000000)
    assert reg.encode() == (
        b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
        b'"endpoints":["PLAINTEXT://h1:9092"],"jmx_port":-1,"port":9092,"host":"h1",'
        b'"version":5,"timestamp":"1700000000000"}'
    )
    assert z.BrokerRegistration.decode(1, reg.encode()) == reg


def test_broker_registration_with_a_rack_and_two_listeners() -> None:
    reg = z.BrokerRegistration(
        2,
        (z.Endpoint("CLIENT", "c", 1, "SSL"), z.Endpoint("PLAINTEXT", "::1", 2)),
        "rack-a",
        5,
    )
    data = reg.encode()
    assert b'"rack":"rack-a"' in data
    assert b'"endpoints":["CLIENT://c:1","PLAINTEXT://[::1]:2"]' in data
    assert b'"port":2,"host":"::1"' in data  # the first PLAINTEXT endpoint
    back = z.BrokerRegistration.decode(2, data)
    assert back == reg
    assert back.endpoint().host == "::1"
    assert back.endpoint("CLIENT").port == 1


#: Znodes as a Kafka 3.9 broker wrote them (captured from a real ZooKeeper; see
#: test_kafka_interop.py for the live version of this check).
KAFKA_WROTE = {
    "registration": b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
    b'"endpoints":["PLAINTEXT://127.0.0.1:47921"],"jmx_port":-1,"port":47921,'
    b'"host":"127.0.0.1","version":5,"timestamp":"1795248212593"}',
    "controller": b'{"version":2,"brokerid":0,"timestamp":"1795248212871","kraftControllerEpoch":-1}',
    "cluster": b'{"version":"1","id":"0ztWcSQTRZWhhkWbu2Zmgg"}',
    "topic": b'{"partitions":{"0":[0],"1":[0]},"topic_id":"Zb3P3fGJQFSlorpxyZYxgw",'
    b'"adding_replicas":{},"removing_replicas":{},"version":3}',
    "state": b'{"controller_epoch":1,"leader":0,"version":1,"leader_epoch":0,"isr":[0]}',
    "config": b'{"version":1,"config":{}}',
}


def test_kafkas_bytes_decode_and_encode_byte_for_byte() -> None:
    reg = z.BrokerRegistration.decode(0, KAFKA_WROTE["registration"])
    assert reg.endpoints == (z.Endpoint("PLAINTEXT", "127.0.0.1", 47921),)
    assert reg.rack is None and reg.version == 5
    assert reg.encode() == KAFKA_WROTE["registration"]
    assert z.ControllerZNode.decode(KAFKA_WROTE["controller"]).encode() == KAFKA_WROTE["controller"]
    assert z.ClusterIdZNode.decode(KAFKA_WROTE["cluster"]).encode() == KAFKA_WROTE["cluster"]
    topic = z.TopicAssignment.decode(KAFKA_WROTE["topic"])
    assert topic.partitions == {0: [0], 1: [0]}
    assert topic.encode() == KAFKA_WROTE["topic"]
    state = z.PartitionState.decode(KAFKA_WROTE["state"])
    assert state == z.PartitionState(0, 0, (0,), 1)
    assert state.encode() == KAFKA_WROTE["state"]
    assert z.EntityConfig.decode(KAFKA_WROTE["config"]).encode() == KAFKA_WROTE["config"]


def test_controller_and_epoch() -> None:
    node = z.ControllerZNode(3, 1700000000000)
    assert node.encode() == (
        b'{"version":2,"brokerid":3,"timestamp":"1700000000000","kraftControllerEpoch":-1}'
    )
    assert z.ControllerZNode.decode(node.encode()) == node
    assert z.encode_controller_epoch(7) == b"7"
    assert z.decode_controller_epoch(b"7") == 7


def test_topic_assignment_is_kafkas_json() -> None:
    tid = uuid.UUID("5a1e3b7c-0000-4000-8000-000000000001")
    node = z.TopicAssignment({0: [1, 2, 3], 1: [2, 3, 1]}, tid)
    assert node.encode() == (
        b'{"partitions":{"0":[1,2,3],"1":[2,3,1]},"topic_id":"'
        + z.topic_id_to_str(tid).encode()
        + b'","adding_replicas":{},"removing_replicas":{},"version":3}'
    )
    assert z.TopicAssignment.decode(node.encode()) == node
    moving = z.TopicAssignment({0: [4, 1]}, None, {0: [4]}, {0: [1]})
    assert b'"adding_replicas":{"0":[4]},"removing_replicas":{"0":[1]}' in moving.encode()
    assert z.TopicAssignment.decode(moving.encode()) == moving


def test_topic_id_is_kafkas_uuid_text() -> None:
    tid = uuid.uuid4()
    text = z.topic_id_to_str(tid)
    assert len(text) == 22 and "=" not in text
    assert z.topic_id_from_str(text) == tid


def test_partition_state_is_kafkas_json() -> None:
    state = z.PartitionState(1, 4, (1, 2), 3)
    assert state.encode() == (
        b'{"controller_epoch":3,"leader":1,"version":1,"leader_epoch":4,"isr":[1,2]}'
    )
    assert z.PartitionState.decode(state.encode()) == state
    recovering = z.PartitionState(2, 5, (2,), 3, 1)
    assert recovering.encode().endswith(b',"leader_recovery_state":1}')
    assert z.PartitionState.decode(recovering.encode()) == recovering


@pytest.mark.parametrize(
    ("node", "data"),
    [
        (
            z.EntityConfig({"retention.ms": "1000"}),
            b'{"version":1,"config":{"retention.ms":"1000"}}',
        ),
        (z.ConfigChangeNotification("topics/t"), b'{"version":2,"entity_path":"topics/t"}'),
        (
            z.LegacyReassignment({("t", 0): [1, 2]}),
            b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2]}]}',
        ),
        (
            z.PreferredReplicaElection(frozenset({("t", 1)})),
            b'{"version":1,"partitions":[{"topic":"t","partition":1}]}',
        ),
        (
            z.ProducerIdBlock(1, 0, 999),
            b'{"version":1,"broker":1,"block_start":"0","block_end":"999"}',
        ),
        (z.LogDirEventNotification(3), b'{"version":1,"broker":3,"event":1}'),
    ],
)
def test_other_znodes(node: object, data: bytes) -> None:
    assert node.encode() == data  # type: ignore[attr-defined]
    assert type(node).decode(data) == node  # type: ignore[attr-defined]


def test_config_change_version_1_is_read() -> None:
    old = b'{"version":1,"entity_type":"topics","entity_name":"t"}'
    assert z.ConfigChangeNotification.decode(old).entity_path == "topics/t"


def test_paths() -> None:
    assert z.partition_state_path("t", 3) == "/brokers/topics/t/partitions/3/state"
    assert z.broker_path(2) == "/brokers/ids/2"
    assert z.topic_config_path("t") == "/config/topics/t"
    assert z.delete_topic_path("t") == "/admin/delete_topics/t"
