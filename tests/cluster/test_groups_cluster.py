"""The group coordinator across a real three-broker cluster (in-process brokers over a real
ZooKeeper): a confluent-kafka consumer group commits offsets through the leader of its
`__consumer_offsets` partition, the coordinator stops, the group finds the new one and its
offsets are still there (whether it stopped cleanly or was killed); a deleted topic's offsets
leave its groups (the coordinator learns of the deletion by UpdateMetadata); and producer ids
from different brokers never collide."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from protocol.errors import ErrorCode
from protocol.messages.delete_topics import DeleteTopicsRequest
from protocol.messages.find_coordinator import FindCoordinatorRequest
from protocol.messages.init_producer_id import InitProducerIdRequest
from protocol.messages.offset_commit import OffsetCommitRequest
from protocol.messages.offset_fetch import OffsetFetchRequest
from tests.cluster.harness import call, create_topic, eventually, start_cluster
from wirebroker.server import RunningBroker
from wirebroker.topics import OFFSETS_TOPIC

pytestmark = pytest.mark.integration

TOPIC = "orders"
GROUP = "billing"
PARTITIONS = 3


def produce(bootstrap: str, first: int, count: int) -> None:
    # idempotent: a produce retried while leaders move is not written twice
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(first, first + count):
        producer.produce(TOPIC, value=b"%d" % i, partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def consume(consumer: Any, wanted: set[int]) -> set[int]:
    """Poll until every value in `wanted` arrived, then commit the positions synchronously
    (retrying while the coordinator moves, as an application would). Delivery is at least
    once: librdkafka may deliver records again after a leader epoch change (it seeks back to
    the offset it was validating), so values are collected as a set."""
    values: set[int] = set()
    for _ in range(600):
        if wanted <= values:
            break
        message = consumer.poll(0.1)
        if message is None or message.error():
            continue
        values.add(int(message.value()))
    for _ in range(100):  # drain what is delivered again, so the positions are at the end
        message = consumer.poll(0.5)
        if message is None:
            break
        if not message.error():
            values.add(int(message.value()))
    for _ in range(100):
        try:
            consumer.commit(asynchronous=False)
            break
        except KafkaException as e:
            if not e.args[0].retriable():
                raise
    else:
        raise AssertionError("the commit never went through")
    return values


def committed(consumer: Any) -> dict[int, int]:
    wanted = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    return {tp.partition: tp.offset for tp in consumer.committed(wanted, timeout=30)}


async def coordinator_of(running: RunningBroker) -> int:
    found = await call(running, FindCoordinatorRequest(key=GROUP, key_type=0), 3)
    return int(found.node_id) if found.error_code == ErrorCode.NONE else -1


async def fetched_offsets(running: RunningBroker) -> tuple[int, dict[int, int]]:
    topics = [OffsetFetchRequest.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0, 1, 2])]
    answer = await call(running, OffsetFetchRequest(group_id=GROUP, topics=topics), 7)
    offsets = {p.partition_index: p.committed_offset for t in answer.topics for p in t.partitions}
    return answer.error_code, offsets


@pytest.mark.parametrize("stop", ["controlled shutdown", "kill"])
def test_group_follows_its_coordinator(zk_connect: str, tmp_path: Path, stop: str) -> None:
    async def main() -> None:
        extra = {
            "offsets_topic_replication_factor": "3",
            "group_initial_rebalance_delay_ms": "0",
        }
        async with trio.open_nursery() as nursery:
            brokers = await start_cluster(nursery, zk_connect, tmp_path, **extra)
            await create_topic(brokers[1], TOPIC, PARTITIONS)
            bootstrap = ",".join(b.bootstrap_servers for b in brokers.values())
            await trio.to_thread.run_sync(produce, bootstrap, 0, 30)

            consumer = Consumer(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": GROUP,
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                    "session.timeout.ms": 10_000,
                }
            )
            try:
                consumer.subscribe([TOPIC])
                first = await trio.to_thread.run_sync(consume, consumer, set(range(30)))
                assert first == set(range(30))
                assert sum((await trio.to_thread.run_sync(committed, consumer)).values()) == 30

                # The coordinator is the leader of the group's offsets partition (RF 3).
                old = await coordinator_of(brokers[1])
                assert old in brokers
                coordinator = brokers[old].broker
                assert coordinator.groups.group_manager.owned == {0}
                offsets_partition = coordinator.partition(OFFSETS_TOPIC, 0)
                assert offsets_partition is not None and sorted(offsets_partition.isr) == [1, 2, 3]
                error, before = await fetched_offsets(brokers[old])
                assert error == ErrorCode.NONE and sum(before.values()) == 30
                others = [b for i, b in brokers.items() if i != old]
                for other in others:
                    assert (await fetched_offsets(other))[0] == ErrorCode.NOT_COORDINATOR

                # A clean stop moves the leadership first (controlled shutdown); a killed
                # broker's partitions get new leaders once its ZooKeeper session is gone. The
                # group moves with its offsets partition either way.
                if stop == "kill":
                    scope = brokers[old].scope
                    assert scope is not None
                    scope.cancel()
                else:
                    await brokers[old].stop()
                new = await eventually(
                    lambda: _new_coordinator(others, old), 30, 0.1, what="a new coordinator"
                )
                successor = brokers[new].broker

                # (other brokers may learn of it from the controller before the new leader
                # has its LeaderAndIsr and loaded the group)
                await eventually(
                    lambda: (
                        successor.groups.group_manager.owned == {0}
                        and GROUP in successor.groups.group_manager.groups
                    ),
                    30,
                    what="the group loaded by its new coordinator",
                )
                assert await fetched_offsets(brokers[new]) == (ErrorCode.NONE, before)

                # The same consumer goes on: it finds the new coordinator and commits there.
                await trio.to_thread.run_sync(produce, bootstrap, 30, 30)
                second = await trio.to_thread.run_sync(consume, consumer, set(range(30, 60)))
                assert second == set(range(30, 60))
                error, after = await fetched_offsets(brokers[new])
                assert error == ErrorCode.NONE and sum(after.values()) == 60
            finally:
                await trio.to_thread.run_sync(consumer.close)

            # A new member of the group starts from the committed offsets (nothing is re-read).
            late = Consumer(
                {"bootstrap.servers": bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest"}
            )
            try:
                assert await trio.to_thread.run_sync(committed, late) == after
            finally:
                await trio.to_thread.run_sync(late.close)

            # InitProducerId to either remaining broker: ids from disjoint ZooKeeper blocks.
            ids = []
            for running in others * 5:
                answer = await call(
                    running,
                    InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=-1),
                    4,
                )
                assert answer.error_code == ErrorCode.NONE
                ids.append(answer.producer_id)
            assert len(set(ids)) == len(ids) == 10
            assert {i // 1000 for i in ids[0::2]}.isdisjoint({i // 1000 for i in ids[1::2]})
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_a_deleted_topics_offsets_leave_its_groups(zk_connect: str, tmp_path: Path) -> None:
    """Kafka's UpdateMetadata handler hands the partitions it deletes to the group coordinator
    (onPartitionsDeleted): their offsets are removed, and a group left without any with them."""
    brokers: dict[int, RunningBroker] = {}

    async def commit(running: RunningBroker, group: str, topic: str) -> bool:
        partition = OffsetCommitRequest.OffsetCommitRequestPartition(
            partition_index=0, committed_offset=7
        )
        request = OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=-1,
            topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[partition])
            ],
        )
        answer = await call(running, request, 8)
        return bool(answer.topics[0].partitions[0].error_code == ErrorCode.NONE)

    async def coordinator(running: RunningBroker) -> RunningBroker | None:
        return brokers.get(await coordinator_of(running))

    async def offsets(running: RunningBroker, group: str) -> set[str]:
        request = OffsetFetchRequest(
            groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group, topics=None)]
        )
        (fetched,) = (await call(running, request, 8)).groups
        assert fetched.error_code == ErrorCode.NONE
        return {t.name for t in fetched.topics}

    async def main() -> None:
        nonlocal brokers
        async with trio.open_nursery() as nursery:
            brokers = await start_cluster(nursery, zk_connect, tmp_path)
            await create_topic(brokers[1], TOPIC, 1)
            await create_topic(brokers[1], "kept", 1)
            found = await eventually(lambda: coordinator(brokers[1]), 30, 0.1, what="a coordinator")
            for group, topic in [(GROUP, TOPIC), (GROUP, "kept"), ("gone", TOPIC)]:
                await eventually(partial(commit, found, group, topic), 30, 0.1, what="a commit")
            deleted = await call(
                brokers[2], DeleteTopicsRequest(topic_names=[TOPIC], timeout_ms=10_000), 5
            )
            assert deleted.responses[0].error_code == ErrorCode.NONE
            groups = found.broker.groups.group_manager.groups
            await eventually(lambda: "gone" not in groups, 30, what="the group without offsets")
            assert await offsets(found, GROUP) == {"kept"}
            nursery.cancel_scope.cancel()

    trio.run(main)


async def _new_coordinator(others: list[RunningBroker], old: int) -> int:
    for running in others:
        node = await coordinator_of(running)
        if node not in (-1, old):
            return node
    return 0
