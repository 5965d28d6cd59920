"""Transactions on a 3-broker cluster (RF 3, min ISR 2): markers are replicated with the data,
a marker sent to a follower is refused, and after the leader is killed the new leader serves
read_committed with the same last stable offset and aborted transactions, and ends the open
transaction when its marker comes."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError
from confluent_kafka import TopicPartition as CkTopicPartition

from protocol.errors import ErrorCode
from protocol.messages.describe_producers import DescribeProducersRequest
from tests.cluster.processes import LOOPBACK, Cluster, running_cluster, wait_for
from tests.wirebroker.helpers import RawClient, fetch_raw
from tests.wirebroker.test_transactions_wire import (
    BROKER_PROPERTIES,
    READ_COMMITTED,
    data_values,
    txn_produce,
    write_markers,
)

pytestmark = pytest.mark.integration

A, B, C, PLAIN = 31, 32, 33, 34


def at(cluster: Cluster, node_id: int) -> str:
    return f"{LOOPBACK}:{cluster.node(node_id).port}"


def test_markers_replicate_and_a_new_leader_serves_read_committed(kind: str) -> None:
    if kind != "wirebroker":
        pytest.skip("raw markers need a broker without a transaction coordinator's checks")
    with running_cluster(kind, overrides=BROKER_PROPERTIES) as cluster:
        topic = "txn-failover"
        cluster.create_topic(topic, 1)
        leader = cluster.leader(topic, 0)
        follower = next(n for n in cluster.nodes if n != leader)
        with RawClient(at(cluster, leader)) as c:
            assert txn_produce(c, topic, A, 0, [b"a1", b"a2"]).base_offset == 0
            assert txn_produce(c, topic, B, 0, [b"b1"]).base_offset == 2
            answer = write_markers(
                c, [(A, 0, 1, False, {topic: [0]}), (B, 0, 1, True, {topic: [0]})]
            )
            assert set(answer.values()) == {ErrorCode.NONE}, answer
            assert txn_produce(c, topic, C, 0, [b"c1"]).base_offset == 5
            plain = txn_produce(c, topic, PLAIN, 0, [b"p1"], transactional=False)
            assert plain.base_offset == 6
        # a marker sent to a follower is refused and writes nothing
        with RawClient(at(cluster, follower)) as c:
            assert write_markers(c, [(C, 0, 1, True, {topic: [0]})]) == {
                (C, topic, 0): ErrorCode.NOT_LEADER_OR_FOLLOWER
            }
        before = fetch_raw(at(cluster, leader), topic, isolation_level=READ_COMMITTED)
        assert (before.high_watermark, before.last_stable_offset) == (7, 5)
        assert [(t.producer_id, t.first_offset) for t in before.aborted_transactions] == [(A, 0)]
        cluster.wait_isr(topic, 0, set(cluster.nodes))

        cluster.node(leader).kill()
        new_leader = wait_for(
            lambda: (n := cluster.leader(topic, 0)) != leader and n,
            60,
            "a new leader",
        )
        after = wait_for(
            lambda: (
                (p := _try_fetch(at(cluster, new_leader), topic)) and p.high_watermark == 7 and p
            ),
            60,
            "the new leader's high watermark",
        )
        assert after.last_stable_offset == 5
        assert [(t.producer_id, t.first_offset) for t in after.aborted_transactions] == [(A, 0)]
        assert [o for o, _ in data_values(after.records)] == [0, 1, 2]
        with RawClient(at(cluster, new_leader)) as c:
            request = DescribeProducersRequest(
                topics=[DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[0])]
            )
            producers = c.request(request, 0).topics[0].partitions[0].active_producers
            starts = {p.producer_id: p.current_txn_start_offset for p in producers}
            assert starts == {A: -1, B: -1, C: 5, PLAIN: -1}
            # the new leader knows the coordinator epoch of A's marker: an older one is fenced
            assert write_markers(c, [(A, 0, 0, True, {topic: [0]})]) == {
                (A, topic, 0): ErrorCode.TRANSACTION_COORDINATOR_FENCED
            }
            answer = wait_for(
                lambda: (
                    (a := write_markers(c, [(C, 0, 1, True, {topic: [0]})]))
                    and a[(C, topic, 0)] != ErrorCode.NOT_ENOUGH_REPLICAS
                    and a
                ),
                60,
                "the marker for C",
            )
            assert answer == {(C, topic, 0): ErrorCode.NONE}
        # a real read_committed consumer on the new leader: exactly the committed records
        assert _consume(cluster.bootstrap, topic) == [b"b1", b"c1", b"p1"]


def _try_fetch(bootstrap: str, topic: str) -> Any:
    try:
        p = fetch_raw(bootstrap, topic, isolation_level=READ_COMMITTED)
    except (OSError, ConnectionError):
        return None
    return p if p.error_code == ErrorCode.NONE else None


def _consume(bootstrap: str, topic: str) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "txn-cluster",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    values: list[bytes] = []
    try:
        consumer.assign([CkTopicPartition(topic, 0, 0)])

        def more() -> bool:
            msg = consumer.poll(0.5)
            if msg is None:
                return False
            error = msg.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                return True
            values.append(msg.value() or b"")
            return False

        wait_for(more, 60, "the end of the partition", interval=0)
    finally:
        consumer.close()
    return values
