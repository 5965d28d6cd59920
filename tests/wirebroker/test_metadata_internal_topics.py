"""Metadata auto-creating the coordinators' internal topics, as Kafka 3.9 does.

A Metadata request naming a missing `__consumer_offsets` or `__transaction_state` with
auto-creation allowed creates it with the coordinator's partition count and configs (the same
topic FindCoordinator would create), answered LEADER_NOT_AVAILABLE and flagged internal; with
the request's `allow_auto_topic_creation` false it stays UNKNOWN_TOPIC_OR_PARTITION (the broker
key off: `test_errors.py`). Then a consumer group commits into the new `__consumer_offsets`,
and a transactional producer commits through the new `__transaction_state`. With
``WIREBROKER_CLUSTER_TARGET=kafka`` the same runs against Apache Kafka 3.9 (how it was checked).
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from protocol.errors import ErrorCode
from protocol.messages.metadata import MetadataRequest
from tests.wirebroker.helpers import (
    RawClient,
    create_topic,
    describe_configs,
    end_offset,
    wait_until,
)
from tests.wirebroker.test_txn_producer_clients import read_committed
from wirebroker.coordinator_store import partition_for
from wirebroker.topics import OFFSETS_TOPIC, TXN_TOPIC

pytestmark = pytest.mark.integration

TIMEOUT = 30.0
OFFSETS_PARTITIONS = 3
TXN_PARTITIONS = 2
SEGMENT_BYTES = "52428800"
BROKER_PROPERTIES = {
    "auto.create.topics.enable": "true",
    "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
    "offsets.topic.replication.factor": "1",
    "offsets.topic.segment.bytes": SEGMENT_BYTES,
    "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.segment.bytes": SEGMENT_BYTES,
    "group.initial.rebalance.delay.ms": "0",
}
DYNAMIC_TOPIC_CONFIG = 1


def metadata(bootstrap: str, name: str, version: int, allow: bool) -> tuple[int, bool, int]:
    """(error code, is_internal, partitions with a leader) of one named topic."""
    request = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=name)], allow_auto_topic_creation=allow
    )
    with RawClient(bootstrap) as client:
        (topic,) = client.request(request, version).topics
    led = [p for p in topic.partitions if p.error_code == ErrorCode.NONE and p.leader_id >= 0]
    return topic.error_code, topic.is_internal, len(led)


def created_by_metadata(bootstrap: str, name: str, partitions: int) -> None:
    """Not created while the request does not allow it; created by the first v4 that does
    (LEADER_NOT_AVAILABLE), then listed with every partition led."""
    for version in (4, 12):
        assert metadata(bootstrap, name, version, allow=False) == (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            True,
            0,
        )
    assert metadata(bootstrap, name, 4, allow=True) == (ErrorCode.LEADER_NOT_AVAILABLE, True, 0)
    wait_until(
        lambda: metadata(bootstrap, name, 12, allow=False) == (ErrorCode.NONE, True, partitions),
        TIMEOUT,
        what=f"{name}'s partitions led",
    )


def topic_configs(bootstrap: str, name: str) -> dict[str, str]:
    """The topic's own configs (its overrides)."""
    result = describe_configs(bootstrap, 2, name)
    assert result.error_code == ErrorCode.NONE
    return {c.name: c.value for c in result.configs if c.config_source == DYNAMIC_TOPIC_CONFIG}


def test_metadata_creates_the_offsets_topic_a_group_then_uses(
    target_bootstrap: str, topic: str
) -> None:
    created_by_metadata(target_bootstrap, OFFSETS_TOPIC, OFFSETS_PARTITIONS)
    assert topic_configs(target_bootstrap, OFFSETS_TOPIC) == {
        "cleanup.policy": "compact",
        "segment.bytes": SEGMENT_BYTES,
        "compression.type": "producer",
    }

    create_topic(target_bootstrap, topic)
    producer = Producer({"bootstrap.servers": target_bootstrap})
    for i in range(3):
        producer.produce(topic, b"%d" % i, partition=0)
    assert producer.flush(TIMEOUT) == 0
    group = f"g-{uuid.uuid4().hex[:8]}"
    config = {
        "bootstrap.servers": target_bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    consumer = Consumer(config)
    try:
        consumer.subscribe([topic])
        values = []
        for _ in range(int(TIMEOUT * 10)):
            if len(values) == 3:
                break
            message = consumer.poll(0.1)
            if message is not None and not message.error():
                values.append(message.value())
        assert values == [b"0", b"1", b"2"]
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    late = Consumer(config)
    try:
        (committed,) = late.committed([TopicPartition(topic, 0)], timeout=TIMEOUT)
        assert committed.offset == 3
    finally:
        late.close()
    # The group lives in its partition of the topic Metadata created.
    index = partition_for(group, OFFSETS_PARTITIONS)
    assert end_offset(target_bootstrap, OFFSETS_TOPIC, index) > 0


def test_metadata_creates_the_transaction_topic_a_producer_then_uses(
    target_bootstrap: str, topic: str
) -> None:
    created_by_metadata(target_bootstrap, TXN_TOPIC, TXN_PARTITIONS)
    assert topic_configs(target_bootstrap, TXN_TOPIC) == {
        "cleanup.policy": "compact",
        "compression.type": "uncompressed",
        "unclean.leader.election.enable": "false",
        "min.insync.replicas": "1",
        "segment.bytes": SEGMENT_BYTES,
    }

    create_topic(target_bootstrap, topic)
    tid = f"tx-{topic}"
    producer = Producer({"bootstrap.servers": target_bootstrap, "transactional.id": tid})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    producer.produce(topic, b"committed", partition=0)
    producer.commit_transaction(TIMEOUT)
    assert read_committed(target_bootstrap, topic, 1, 1) == [b"committed"]
    # The transactional id lives in its partition of the topic Metadata created.
    assert end_offset(target_bootstrap, TXN_TOPIC, partition_for(tid, TXN_PARTITIONS)) > 0
