"""A failed log directory in a cluster (Kafka's onBrokerLogDirFailure), in-process.

Broker 1 of three has two `log.dirs`; an I/O error (a monkeypatched `os.fsync` raising EIO for
files under one of them) takes that directory offline. Broker 1 reports it in ZooKeeper
(`/log_dir_event_notification`), the controller learns from broker 1's KAFKA_STORAGE_ERROR
answers which replicas are offline, and the partition broker 1 led there gets a new leader from
its ISR: an acks=all producer goes on, every acknowledged record can be read back, and the
partition in broker 1's healthy directory keeps its leader.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import trio

from protocol.errors import ErrorCode
from protocol.messages.create_topics import CreateTopicsRequest
from protocol.messages.metadata import MetadataRequest
from protocol.record_batch import SimpleRecord
from tests.cluster.harness import call, eventually, start_broker
from tests.wirebroker.helpers import decode_records, fetch_request, produce_request
from wirebroker.server import RunningBroker

pytestmark = pytest.mark.integration

TOPIC = "t"


async def leaders_and_offline(running: RunningBroker) -> dict[int, tuple[int, list[int]]]:
    """Per partition of TOPIC: (leader, offline replicas), from `running`'s Metadata."""
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)])
    meta = await call(running, request, 12)
    return {
        p.partition_index: (p.leader_id, list(p.offline_replicas))
        for p in meta.topics[0].partitions
    }


async def produce(running: RunningBroker, partition: int, value: bytes) -> int:
    request = produce_request(TOPIC, partition, [SimpleRecord(b"k", value)], acks=-1)
    response = await call(running, request, 9)
    return int(response.responses[0].partition_responses[0].error_code)


async def acked_by(running: RunningBroker, value: bytes) -> bool:
    return await produce(running, 0, value) == ErrorCode.NONE


async def fetch_values(running: RunningBroker, partition: int) -> list[bytes]:
    """Every record value of the partition up to its high watermark, read from `running`."""
    values: list[bytes] = []
    offset = 0
    while True:
        request = fetch_request(TOPIC, partition, offset)
        answer = (await call(running, request, 12)).responses[0].partitions[0]
        assert answer.error_code == ErrorCode.NONE, ErrorCode(answer.error_code).name
        records = decode_records(answer.records)
        values += [v for _, _, v in records if v is not None]
        if not records:
            return values
        offset = records[-1][0] + 1


def test_a_failed_log_dir_moves_its_leaders(
    zk_connect: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            dirs = f"{tmp_path / 'b1-a'},{tmp_path / 'b1-b'}"
            b1 = await start_broker(nursery, zk_connect, tmp_path, 1, log_dirs=dirs)
            b2 = await start_broker(nursery, zk_connect, tmp_path, 2)
            b3 = await start_broker(nursery, zk_connect, tmp_path, 3)
            brokers = {1: b1, 2: b2, 3: b3}
            topic = CreateTopicsRequest.CreatableTopic(
                name=TOPIC,
                num_partitions=-1,
                replication_factor=-1,
                assignments=[
                    CreateTopicsRequest.CreatableReplicaAssignment(
                        partition_index=p, broker_ids=[1, 2, 3]
                    )
                    for p in (0, 1)
                ],
                configs=[
                    CreateTopicsRequest.CreatableTopicConfig(name="flush.messages", value="1"),
                    CreateTopicsRequest.CreatableTopicConfig(name="min.insync.replicas", value="2"),
                ],
            )
            created = await call(b1, CreateTopicsRequest(topics=[topic], timeout_ms=10_000), 7)
            assert created.topics[0].error_code == ErrorCode.NONE
            manager = b1.broker.log_manager
            await eventually(
                lambda: all(manager.log_dir_of(TOPIC, p) for p in (0, 1)), what="broker 1's logs"
            )
            failing = manager.log_dir_of(TOPIC, 0)
            assert failing is not None and manager.log_dir_of(TOPIC, 1) != failing

            acked: list[bytes] = []
            for i in range(10):
                value = b"before-%d" % i
                await eventually(
                    lambda value=value: acked_by(b1, value),
                    interval=0.05,
                    what=f"{value!r} acked (the followers in the ISR)",
                )
                acked.append(value)

            real_fsync = os.fsync

            def fsync(fd: int) -> None:
                if os.readlink(f"/proc/self/fd/{fd}").startswith(f"{failing}/"):
                    raise OSError(errno.EIO, "Input/output error")
                real_fsync(fd)

            monkeypatch.setattr(os, "fsync", fsync)
            assert await produce(b1, 0, b"lost") == ErrorCode.KAFKA_STORAGE_ERROR
            assert manager.offline_dirs == {failing}

            # The producer goes on: it asks for the leader and writes there (acks=all).
            with trio.fail_after(20):
                i = 0
                while len(acked) < 30:
                    leader, _ = (await leaders_and_offline(b2))[0]
                    if leader in brokers:
                        value = b"after-%d" % i
                        if await produce(brokers[leader], 0, value) == ErrorCode.NONE:
                            acked.append(value)
                            i += 1
                            continue
                    await trio.sleep(0.05)  # a producer's retry pacing while the leader moves

            state = (await leaders_and_offline(b2))[0]
            assert state[0] in (2, 3) and state[1] == [1], state
            controller = next(
                b.broker.cluster.controller
                for b in brokers.values()
                if b.broker.cluster and b.broker.cluster.controller.active
            )
            info = controller.ctx.states[(TOPIC, 0)]
            assert 1 not in info.state.isr and info.state.leader in (2, 3)
            assert controller.ctx.states[(TOPIC, 1)].state.leader == 1  # the healthy directory
            # The new leader cannot take the offline replica back into the ISR.
            leader = info.state.leader
            change = {(TOPIC, 0): (info.state.leader_epoch, (*info.state.isr, 1), info.version, 0)}
            top, results = await controller.call(
                lambda: controller.alter_partition(
                    leader, controller.ctx.live[leader].epoch, change
                )
            )
            assert (top, results[(TOPIC, 0)]) == (ErrorCode.NONE, ErrorCode.INELIGIBLE_REPLICA)
            assert await produce(b1, 1, b"healthy") == ErrorCode.NONE

            assert controller.channel is not None
            await eventually(
                lambda: (1, "StopReplicaRequest") in controller.channel.sent,  # type: ignore[union-attr]
                what="StopReplica for the offline replica",
            )
            consumed = await fetch_values(brokers[state[0]], 0)
            assert set(acked) <= set(consumed), set(acked) - set(consumed)
            assert not await b1.broker.cluster.zk.get_children(  # type: ignore[union-attr]
                "/log_dir_event_notification"
            ), "the notification is deleted"
            nursery.cancel_scope.cancel()

    trio.run(main)
