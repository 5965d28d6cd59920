"""The embedded broker's Metadata answer follows every change of its topics, seen by clients.

The broker keeps what Metadata tells (its metadata cache) as partitions are served and deleted
instead of rebuilding it per request, so these check that no change is missed:
- confluent-kafka's AdminClient creates a topic, adds partitions, deletes it and creates it
  again with the same name; after each step its `list_topics` and a raw Metadata v12 (by name,
  by topic id, and for all topics) tell exactly the partitions there are, led by this broker,
  and the topic's current id (the old id is UNKNOWN_TOPIC_ID once deleted, as in Kafka);
  kafka-python's consumer sees the same partitions.
- An all-topics answer (v12, and v0's empty list) lists the topics in name order, each with
  its partitions in index order, each the same as when the topic is named.
- A broker restarted over its data tells the same topics, partitions and ids as before.
A topic or partitions whose logs are still being made are not told yet: test_partition_create.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka import KafkaConsumer

from protocol.errors import ErrorCode
from protocol.messages.metadata import MetadataRequest, MetadataResponse
from protocol.primitives import ZERO_UUID
from tests.broker_process import BrokerProcess, serving
from tests.wirebroker.helpers import RawClient, ToldPartition, create_topic, told_partitions

pytestmark = pytest.mark.integration

TIMEOUT = 30.0
NODE = 0  # broker.id's default

Partitions = dict[int, ToldPartition]


def _metadata(
    bootstrap: str, topics: list[MetadataRequest.MetadataRequestTopic] | None, version: int = 12
) -> MetadataResponse:
    request = MetadataRequest(topics=topics, allow_auto_topic_creation=version < 4)
    with RawClient(bootstrap, timeout=TIMEOUT) as client:
        response: MetadataResponse = client.request(request, version)
    return response


def _named(bootstrap: str, name: str) -> MetadataResponse.MetadataResponseTopic:
    (topic,) = _metadata(bootstrap, [MetadataRequest.MetadataRequestTopic(name=name)]).topics
    return topic


def _by_id(bootstrap: str, topic_id: uuid.UUID) -> MetadataResponse.MetadataResponseTopic:
    (topic,) = _metadata(
        bootstrap, [MetadataRequest.MetadataRequestTopic(name=None, topic_id=topic_id)]
    ).topics
    return topic


def _served(count: int) -> Partitions:
    """What `count` partitions of this broker are told as: led here, its only replica."""
    return {i: (ErrorCode.NONE, NODE, [NODE], [NODE], []) for i in range(count)}


def _told(bootstrap: str, admin: AdminClient, name: str) -> tuple[Partitions, uuid.UUID]:
    """The topic's partitions and id as Metadata v12 tells them by name, checked against the
    all-topics answer, the answer by id, and confluent-kafka's `list_topics`."""
    named = _named(bootstrap, name)
    assert named.error_code == ErrorCode.NONE, named
    assert named.topic_id != ZERO_UUID
    told = told_partitions(named)
    every = {t.name: t for t in _metadata(bootstrap, None).topics}
    assert told_partitions(every[name]) == told
    assert every[name].topic_id == named.topic_id
    by_id = _by_id(bootstrap, named.topic_id)
    assert (by_id.error_code, by_id.name) == (ErrorCode.NONE, name)
    assert told_partitions(by_id) == told
    listed = admin.list_topics(timeout=TIMEOUT).topics[name]
    assert listed.error is None
    assert {i: (p.leader, p.replicas, p.isrs) for i, p in listed.partitions.items()} == {
        i: (leader, replicas, isr) for i, (_e, leader, replicas, isr, _o) in told.items()
    }
    assert list(told) == sorted(told)  # in index order
    return told, named.topic_id


def _gone(bootstrap: str, admin: AdminClient, name: str, old_id: uuid.UUID) -> None:
    assert _named(bootstrap, name).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert _by_id(bootstrap, old_id).error_code == ErrorCode.UNKNOWN_TOPIC_ID
    assert name not in {t.name for t in _metadata(bootstrap, None).topics}
    assert name not in admin.list_topics(timeout=TIMEOUT).topics


def _done(futures: dict[str, Any]) -> None:
    for future in futures.values():
        future.result(timeout=TIMEOUT)


def test_metadata_follows_create_add_partitions_delete_and_recreate(
    broker: BrokerProcess, topic: str
) -> None:
    bootstrap = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    _done(admin.create_topics([NewTopic(topic, 3, 1)], operation_timeout=TIMEOUT))
    partitions, first_id = _told(bootstrap, admin, topic)
    assert partitions == _served(3)

    _done(admin.create_partitions([NewPartitions(topic, 5)], operation_timeout=TIMEOUT))
    partitions, topic_id = _told(bootstrap, admin, topic)
    assert (partitions, topic_id) == (_served(5), first_id)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        assert consumer.partitions_for_topic(topic) == {0, 1, 2, 3, 4}
    finally:
        consumer.close()

    _done(admin.delete_topics([topic], operation_timeout=TIMEOUT))
    _gone(bootstrap, admin, topic, first_id)

    _done(admin.create_topics([NewTopic(topic, 2, 1)], operation_timeout=TIMEOUT))
    partitions, second_id = _told(bootstrap, admin, topic)
    assert partitions == _served(2)
    assert second_id != first_id
    assert _by_id(bootstrap, first_id).error_code == ErrorCode.UNKNOWN_TOPIC_ID


def test_all_topics_in_name_order_each_as_when_named(broker: BrokerProcess, topic: str) -> None:
    names = [f"{topic}-{suffix}" for suffix in ("c", "a", "b")]
    for count, name in enumerate(names, start=1):
        create_topic(broker.bootstrap, name, partitions=count * 4)
    for version, every in (
        (12, _metadata(broker.bootstrap, None)),
        (0, _metadata(broker.bootstrap, [], version=0)),
    ):
        told = [t.name for t in every.topics]
        assert told == sorted(told), version
        assert set(names) <= set(told)
        for t in every.topics:
            assert [p.partition_index for p in t.partitions] == list(range(len(t.partitions)))
        named = _metadata(
            broker.bootstrap,
            [MetadataRequest.MetadataRequestTopic(name=n) for n in names],
            version=version,
        )
        assert [t.name for t in named.topics] == names
        listed = {t.name: t for t in every.topics}
        for t in named.topics:
            assert told_partitions(t) == told_partitions(listed[t.name]), (version, t.name)
        assert [len(listed[n].partitions) for n in names] == [4, 8, 12]
        assert [(b.node_id, b.port) for b in every.brokers] == [(NODE, broker.port)]
    assert _metadata(broker.bootstrap, None).controller_id == NODE


def test_a_restarted_broker_tells_the_same_topics(tmp_path: Path) -> None:
    with serving(BrokerProcess(tmp_path / "data")) as process:
        admin = AdminClient({"bootstrap.servers": process.bootstrap})
        _done(
            admin.create_topics(
                [NewTopic(name, 3, 1) for name in ("kept", "grown", "dropped")],
                operation_timeout=TIMEOUT,
            )
        )
        _done(admin.create_partitions([NewPartitions("grown", 6)], operation_timeout=TIMEOUT))
        dropped = _named(process.bootstrap, "dropped").topic_id
        _done(admin.delete_topics(["dropped"], operation_timeout=TIMEOUT))
        before = {name: _told(process.bootstrap, admin, name) for name in ("kept", "grown")}
        process.restart()
        admin = AdminClient({"bootstrap.servers": process.bootstrap})
        after = {name: _told(process.bootstrap, admin, name) for name in ("kept", "grown")}
        assert after == before
        assert [len(parts) for parts, _id in after.values()] == [3, 6]
        _gone(process.bootstrap, admin, "dropped", dropped)


def test_a_topic_told_at_one_version_is_told_right_at_the_others(
    broker: BrokerProcess, topic: str
) -> None:
    """A topic's answer is kept per version band: asked alternately at v12 (with its id), v9
    (before ids: the zero id) and v0, each answer is that version's."""
    create_topic(broker.bootstrap, topic, partitions=2)
    named = [MetadataRequest.MetadataRequestTopic(name=topic)]
    first = _metadata(broker.bootstrap, named).topics[0].topic_id
    assert first != ZERO_UUID
    for version, topic_id in ((9, ZERO_UUID), (12, first), (0, ZERO_UUID), (10, first)):
        (told,) = _metadata(broker.bootstrap, named, version=version).topics
        assert (told.error_code, told.topic_id) == (ErrorCode.NONE, topic_id), version
        assert told_partitions(told) == _served(2), version
