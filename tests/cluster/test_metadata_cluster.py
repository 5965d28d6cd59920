"""A cluster member's Metadata answer follows the controller's UpdateMetadata, per partition.

A real broker (1, with a second client listener EXTERNAL) and two fake brokers (2 and 3, that
only register and answer the controller) against a real ZooKeeper; broker 1 is the controller.
A topic's partitions are led by each of them ([1, 3], [2, 1], [3, 2]). Through Metadata, as
Kafka's ZkMetadataCache answers: every partition's leader, leader epoch, replicas, ISR and
offline replicas; on the listener the fake brokers lack, LISTENER_NOT_FOUND (v6+,
LEADER_NOT_AVAILABLE before) with leader -1 and only broker 1 listed. Broker 3 leaves: the
partition it led moves to broker 2 with a new leader epoch, it leaves the ISRs and is offline
in its partitions (v0 lists only live replicas and answers REPLICA_NOT_AVAILABLE). Broker 2
leaves: its partition moves to broker 1, and the last partition has no leader
(LEADER_NOT_AVAILABLE, -1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from protocol.errors import ErrorCode
from protocol.messages.create_topics import CreateTopicsRequest
from protocol.messages.metadata import MetadataRequest, MetadataResponse
from tests.cluster.harness import FakeBroker, call, eventually, start_broker
from tests.wirebroker.helpers import ToldPartition, told_partitions
from wirebroker.peer import request_once
from wirebroker.server import RunningBroker

pytestmark = pytest.mark.integration

Told = dict[int, ToldPartition]


async def _metadata(running: RunningBroker, listener: str, version: int) -> MetadataResponse:
    endpoint = next(x for x in running.listeners if x.name == listener)
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="m")])
    if version >= 4:
        request.allow_auto_topic_creation = False
    answer: MetadataResponse = await request_once(
        endpoint.host, endpoint.port, request, version, client_id="t"
    )
    return answer


def _told(answer: MetadataResponse) -> Told:
    (topic,) = answer.topics
    return told_partitions(topic)


def _epochs(answer: MetadataResponse) -> dict[int, int]:
    (topic,) = answer.topics
    return {p.partition_index: p.leader_epoch for p in topic.partitions}


async def _until(running: RunningBroker, listener: str, version: int, expected: Told) -> Any:
    """The answer once it tells `expected` (the controller's updates are asynchronous)."""
    last: list[Told] = []

    async def check() -> MetadataResponse | None:
        answer = await _metadata(running, listener, version)
        last[:] = [_told(answer)]
        return answer if last[0] == expected else None

    with trio.move_on_after(15):
        while True:
            answer = await check()
            if answer is not None:
                return answer
            await trio.sleep(0.05)
    raise AssertionError(f"{listener} v{version} told {last}, not {expected}")


def test_metadata_follows_leaders_isr_and_listeners(zk_connect: str, tmp_path: Path) -> None:
    NONE, LNA = ErrorCode.NONE, ErrorCode.LEADER_NOT_AVAILABLE

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            fakes = {2: FakeBroker(2), 3: FakeBroker(3)}
            for fake in fakes.values():
                await nursery.start(fake.run, zk_connect)
            b1 = await start_broker(
                nursery,
                zk_connect,
                tmp_path,
                1,
                listeners="PLAINTEXT://127.0.0.1:0,EXTERNAL://127.0.0.1:0",
                listener_security_protocol_map="PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT",
                # broker 1 keeps broker 3 in the ISR it leads until the controller says
                replica_lag_time_max_ms="600000",
            )
            cluster = b1.broker.cluster
            assert cluster is not None
            await eventually(lambda: cluster.controller.active, what="broker 1 controls")
            assignments = [
                CreateTopicsRequest.CreatableReplicaAssignment(partition_index=i, broker_ids=r)
                for i, r in enumerate(([1, 3], [2, 1], [3, 2]))
            ]
            topic = CreateTopicsRequest.CreatableTopic(
                name="m", num_partitions=-1, replication_factor=-1, assignments=assignments
            )
            made = await call(b1, CreateTopicsRequest(topics=[topic], timeout_ms=10_000), 7)
            assert made.topics[0].error_code == ErrorCode.NONE

            answer = await _until(
                b1,
                "PLAINTEXT",
                12,
                {
                    0: (NONE, 1, [1, 3], [1, 3], []),
                    1: (NONE, 2, [2, 1], [2, 1], []),
                    2: (NONE, 3, [3, 2], [3, 2], []),
                },
            )
            assert [b.node_id for b in answer.brokers] == [1, 2, 3]
            first_epochs = _epochs(answer)
            # Brokers 2 and 3 have no EXTERNAL endpoint: their partitions have no leader there.
            external = await _metadata(b1, "EXTERNAL", 12)
            assert [b.node_id for b in external.brokers] == [1]
            assert {i: p[:2] for i, p in _told(external).items()} == {
                0: (NONE, 1),
                1: (ErrorCode.LISTENER_NOT_FOUND, -1),
                2: (ErrorCode.LISTENER_NOT_FOUND, -1),
            }
            older = _told(await _metadata(b1, "EXTERNAL", 5))
            assert {i: p[:2] for i, p in older.items()} == {
                0: (NONE, 1),
                1: (LNA, -1),
                2: (LNA, -1),
            }

            fake3 = fakes[3].zk
            assert fake3 is not None
            await fake3.close()  # broker 3 leaves
            answer = await _until(
                b1,
                "PLAINTEXT",
                12,
                {
                    0: (NONE, 1, [1, 3], [1], [3]),
                    1: (NONE, 2, [2, 1], [2, 1], []),
                    2: (NONE, 2, [3, 2], [2], [3]),
                },
            )
            assert [b.node_id for b in answer.brokers] == [1, 2]
            second_epochs = _epochs(answer)
            assert second_epochs[2] > first_epochs[2]
            assert _told(await _metadata(b1, "PLAINTEXT", 0)) == {
                0: (ErrorCode.REPLICA_NOT_AVAILABLE, 1, [1], [1], []),
                1: (NONE, 2, [2, 1], [2, 1], []),
                2: (ErrorCode.REPLICA_NOT_AVAILABLE, 2, [2], [2], []),
            }

            fake2 = fakes[2].zk
            assert fake2 is not None
            await fake2.close()  # broker 2 leaves: broker 1 leads its partition
            answer = await _until(
                b1,
                "PLAINTEXT",
                12,
                {
                    0: (NONE, 1, [1, 3], [1], [3]),
                    1: (NONE, 1, [2, 1], [1], [2]),
                    2: (LNA, -1, [3, 2], [2], [3, 2]),
                },
            )
            assert _epochs(answer)[1] > second_epochs[1]
            nursery.cancel_scope.cancel()

    trio.run(main)
