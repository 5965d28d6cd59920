"""Metadata auto-creating the internal topics in a three-broker cluster (in-process brokers over a
real ZooKeeper), as Kafka 3.9 does: `__transaction_state` is written to ZooKeeper with its
replication factor and configs, its leaders load their partitions and coordinate transactions;
`__consumer_offsets` with a replication factor above the live brokers is not created and is
answered INVALID_REPLICATION_FACTOR (Kafka's ZkAdminManager)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from protocol.errors import ErrorCode
from protocol.messages.find_coordinator import FindCoordinatorRequest
from protocol.messages.init_producer_id import InitProducerIdRequest
from protocol.messages.metadata import MetadataRequest
from tests.cluster.harness import call, eventually, start_cluster
from wirebroker.coordinator_store import partition_for
from wirebroker.topics import OFFSETS_TOPIC, TXN_TOPIC

pytestmark = pytest.mark.integration

TXN_PARTITIONS = 2


def test_metadata_creates_the_internal_topics_in_zookeeper(zk_connect: str, tmp_path: Path) -> None:
    async def main() -> None:
        extra = {
            "offsets_topic_replication_factor": "4",  # more than the 3 live brokers
            "transaction_state_log_num_partitions": str(TXN_PARTITIONS),
            "transaction_state_log_replication_factor": "3",
        }
        async with trio.open_nursery() as nursery:
            brokers = await start_cluster(nursery, zk_connect, tmp_path, **extra)
            first = brokers[1]
            request = MetadataRequest(
                topics=[
                    MetadataRequest.MetadataRequestTopic(name=n) for n in (OFFSETS_TOPIC, TXN_TOPIC)
                ],
                allow_auto_topic_creation=True,
            )
            answer = await call(first, request, 12)
            assert [(t.name, t.error_code, t.is_internal) for t in answer.topics] == [
                (OFFSETS_TOPIC, ErrorCode.INVALID_REPLICATION_FACTOR, True),
                (TXN_TOPIC, ErrorCode.LEADER_NOT_AVAILABLE, True),
            ]
            cluster = first.broker.cluster
            assert cluster is not None
            assert await cluster.topic_assignment(OFFSETS_TOPIC) is None
            assignment = await cluster.topic_assignment(TXN_TOPIC)
            assert assignment is not None
            assert {p: len(r) for p, r in assignment.partitions.items()} == {0: 3, 1: 3}
            await eventually(lambda: TXN_TOPIC in cluster.topic_configs, what="its configs")
            assert cluster.topic_configs[TXN_TOPIC] == {
                "cleanup.policy": "compact",
                "compression.type": "uncompressed",
                "unclean.leader.election.enable": "false",
                "min.insync.replicas": "2",
                "segment.bytes": "104857600",
            }

            # Each partition's leader loads it and coordinates its transactional ids.
            def loaded() -> bool:
                for index in range(TXN_PARTITIONS):
                    p = first.broker.metadata_cache.partition(TXN_TOPIC, index)
                    if p is None or p.leader not in brokers:
                        return False
                    if index not in brokers[p.leader].broker.transactions.state.partitions:
                        return False
                return True

            await eventually(loaded, what=f"{TXN_TOPIC} loaded by its leaders")
            answer = await call(first, request, 12)
            assert [(t.name, len(t.partitions)) for t in answer.topics] == [
                (OFFSETS_TOPIC, 0),
                (TXN_TOPIC, TXN_PARTITIONS),
            ]
            tid = "metadata-made"
            found = await call(first, FindCoordinatorRequest(key=tid, key_type=1), 3)
            p = first.broker.metadata_cache.partition(TXN_TOPIC, partition_for(tid, TXN_PARTITIONS))
            assert p is not None and (found.error_code, found.node_id) == (ErrorCode.NONE, p.leader)
            init = await call(
                brokers[p.leader],
                InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60_000),
                4,
            )
            assert (init.error_code, init.producer_epoch) == (ErrorCode.NONE, 0)
            nursery.cancel_scope.cancel()

    trio.run(main)
