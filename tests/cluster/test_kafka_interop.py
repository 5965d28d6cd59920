"""Our znodes and Kafka 3.9's, both ways, on one ZooKeeper: a real Kafka broker writes, our codecs
read (and encode the same JSON); we write a topic, Kafka's controller reads it and serves it."""

from __future__ import annotations

import json
import uuid

import pytest
from kazoo.client import KazooClient

from compat.kafka_process import jars_available, kafka_broker
from protocol.errors import ErrorCode
from protocol.messages.create_topics import CreateTopicsRequest
from protocol.messages.metadata import MetadataRequest
from tests.cluster.processes import zk_session
from tests.wirebroker.helpers import RawClient, wait_until
from wirebroker.zk import znodes as z

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not jars_available(), reason="no Kafka jars: run `make jars`"),
]


def test_kafka_reads_ours_and_we_read_kafkas(zk_connect: str) -> None:
    hosts, _, chroot = zk_connect.partition("/")
    with zk_session(KazooClient(hosts=hosts)) as zk:
        zk.ensure_path("/" + chroot)
        with kafka_broker(zk_connect, broker_id=0, heap="384m") as kafka:
            root = "/" + chroot

            def get(path: str) -> bytes:
                data, _ = zk.get(root + path)
                return bytes(data)

            # Kafka's registration, controller, epoch and cluster id decode with our codecs, and
            # our encoding of what we decoded is the same JSON (keys, types, values)
            reg_bytes = get(z.broker_path(0))
            reg = z.BrokerRegistration.decode(0, reg_bytes)
            assert reg.endpoint().port == kafka.port and reg.rack is None
            assert json.loads(reg.encode()) == json.loads(reg_bytes)
            controller_bytes = get(z.CONTROLLER)
            controller = z.ControllerZNode.decode(controller_bytes)
            assert controller.broker_id == 0
            assert json.loads(controller.encode()) == json.loads(controller_bytes)
            epoch = z.decode_controller_epoch(get(z.CONTROLLER_EPOCH))
            assert z.encode_controller_epoch(epoch) == get(z.CONTROLLER_EPOCH)
            cluster_bytes = get(z.CLUSTER_ID)
            assert z.ClusterIdZNode.decode(cluster_bytes).encode() == cluster_bytes

            # a topic Kafka creates: assignment, partition state, config
            with RawClient(kafka.bootstrap_servers) as client:
                topic = CreateTopicsRequest.CreatableTopic(
                    name="theirs",
                    num_partitions=2,
                    replication_factor=1,
                    configs=[
                        CreateTopicsRequest.CreatableTopicConfig(name="retention.ms", value="5000")
                    ],
                )
                answer = client.request(CreateTopicsRequest(topics=[topic], timeout_ms=30_000), 7)
            assert answer.topics[0].error_code == ErrorCode.NONE
            topic_bytes = get(z.topic_path("theirs"))
            assignment = z.TopicAssignment.decode(topic_bytes)
            assert assignment.partitions == {0: [0], 1: [0]}
            assert assignment.topic_id == answer.topics[0].topic_id
            assert json.loads(assignment.encode()) == json.loads(topic_bytes)
            state_bytes = wait_until(
                lambda: (
                    zk.exists(root + z.partition_state_path("theirs", 1))
                    and get(z.partition_state_path("theirs", 1))
                ),
                30,
                what="Kafka's partition state",
            )
            state = z.PartitionState.decode(state_bytes)
            assert (state.leader, state.isr, state.controller_epoch) == (0, (0,), epoch)
            assert json.loads(state.encode()) == json.loads(state_bytes)
            config_bytes = get(z.topic_config_path("theirs"))
            assert z.EntityConfig.decode(config_bytes).config == {"retention.ms": "5000"}
            assert json.loads(z.EntityConfig({"retention.ms": "5000"}).encode()) == json.loads(
                config_bytes
            )

            # a topic we write (config first, then the assignment, as AdminZkClient does):
            # Kafka's controller makes its partitions and serves it
            ours = uuid.uuid4()
            zk.create(root + z.topic_config_path("ours"), z.EntityConfig({}).encode())
            zk.create(
                root + z.topic_path("ours"),
                z.TopicAssignment({0: [0], 1: [0], 2: [0]}, ours).encode(),
            )

            def served() -> bool:
                with RawClient(kafka.bootstrap_servers) as client:
                    meta = client.request(
                        MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="ours")]),
                        12,
                    )
                t = meta.topics[0]
                return (
                    t.error_code == ErrorCode.NONE and len(t.partitions) == 3 and t.topic_id == ours
                )

            wait_until(served, 30, interval=0.2, what="Kafka to serve our topic")
            ours_state = z.PartitionState.decode(get(z.partition_state_path("ours", 2)))
            assert ours_state.leader == 0
