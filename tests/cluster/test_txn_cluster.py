"""The transaction coordinator in a three-broker cluster.

- Real broker processes (and, with ``WIREBROKER_CLUSTER_TARGET=kafka``, Apache Kafka 3.9, how
  the scenario was checked): confluent-kafka's transactional producer writes to a replicated
  topic, the broker coordinating its transactional id is killed (kill -9) with the transaction
  open; the transaction is finished through the new coordinator (which loaded
  `__transaction_state`), the producer's next transaction works, and a read_committed consumer
  sees exactly the committed records.
- In-process brokers over a real ZooKeeper: a partition leader verifies a transactional batch
  with the coordinator on another broker (KIP-890: refused before the partition is added); the
  coordinator stops between the PrepareCommit record and its markers (its marker sender held);
  the broker elected leader of the `__transaction_state` partition loads it and completes the
  commit by writing the markers.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
import trio
from confluent_kafka import KafkaException, Producer

from protocol.errors import ErrorCode
from protocol.messages.find_coordinator import FindCoordinatorRequest
from protocol.messages.init_producer_id import InitProducerIdRequest
from protocol.messages.produce import ProduceRequest
from protocol.record_batch import SimpleRecord
from protocol.record_builder import build_record_batch
from tests.cluster.harness import call, create_topic, eventually, start_cluster
from tests.cluster.processes import running_cluster, wait_for
from tests.wirebroker.test_txn_producer_clients import read_committed
from wirebroker.coordinator_store import partition_for
from wirebroker.partition import TopicPartition as Partition
from wirebroker.server import RunningBroker
from wirebroker.topics import TXN_TOPIC
from wirebroker.txn.state import TxnState

pytestmark = pytest.mark.integration

TOPIC = "payments"
PARTITIONS = 3
TXN_PROPERTIES = {
    "transaction.state.log.num.partitions": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
}


def finish(producer: Producer) -> bool:
    """Commit the open transaction while the coordinator moves; abort it if the client says it
    must be. Whether it committed."""
    deadline = time.monotonic() + 120
    while True:
        try:
            producer.commit_transaction(30)
            return True
        except KafkaException as e:
            error = e.args[0]
            if error.txn_requires_abort():
                producer.abort_transaction(60)
                return False
            assert error.retriable() and time.monotonic() < deadline, error


def test_coordinator_killed_mid_transaction(kind: str) -> None:
    tid = f"payments-{uuid.uuid4().hex[:6]}"
    with running_cluster(kind, overrides=TXN_PROPERTIES) as cluster:
        cluster.create_topic(TOPIC, PARTITIONS)
        producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "transactional.id": tid,
                "transaction.timeout.ms": 120_000,
            }
        )
        producer.init_transactions(90)
        cluster.wait_fully_replicated(TXN_TOPIC)
        coordinator = cluster.leader(TXN_TOPIC, partition_for(tid, 3))

        producer.begin_transaction()
        for i in range(30):
            producer.produce(TOPIC, b"first-%d" % i, partition=i % PARTITIONS)
        assert producer.flush(60) == 0
        cluster.node(coordinator).kill()  # with the transaction open
        wait_for(
            lambda: cluster.leader(TXN_TOPIC, partition_for(tid, 3)) != coordinator,
            90.0,
            "a new transaction coordinator",
        )
        committed = finish(producer)

        producer.begin_transaction()
        for i in range(30):
            producer.produce(TOPIC, b"second-%d" % i, partition=i % PARTITIONS)
        producer.commit_transaction(90)
        expected = [b"second-%d" % i for i in range(30)]
        if committed:
            expected += [b"first-%d" % i for i in range(30)]
        seen = read_committed(cluster.bootstrap, TOPIC, PARTITIONS, len(expected), timeout=90)
        assert sorted(seen) == sorted(expected)


def test_a_prepared_commit_is_completed_by_the_next_coordinator(
    zk_connect: str, tmp_path: Path
) -> None:
    async def main() -> None:
        extra = {k.replace(".", "_"): v for k, v in TXN_PROPERTIES.items()}
        async with trio.open_nursery() as nursery:
            brokers = await start_cluster(nursery, zk_connect, tmp_path, **extra)
            await create_topic(brokers[1], TOPIC, PARTITIONS)
            tid = "prepared"
            # the first lookup creates __transaction_state; its leaders come after
            old = await eventually(
                lambda: _coordinator(brokers, tid), 60, 0.1, what=f"a coordinator of {tid}"
            )
            first = brokers[old].broker.transactions
            with trio.fail_after(15):  # the coordinator loaded
                await first.state.wait_loaded()
            init = await call(
                brokers[old],
                InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60_000),
                4,
            )
            assert init.error_code == ErrorCode.NONE
            pid, epoch = init.producer_id, init.producer_epoch
            partitions = frozenset({Partition(TOPIC, p) for p in range(PARTITIONS)})
            # KIP-890 across brokers: a leader asks the coordinator (AddPartitionsToTxn v5
            # verify_only) before a transactional batch starts a transaction there
            elsewhere = next(p for p in range(PARTITIONS) if _leader(brokers, p) != old)
            assert await _produce(brokers, elsewhere, pid, epoch) == ErrorCode.INVALID_TXN_STATE
            assert await first.add_partitions(tid, pid, epoch, partitions) == ErrorCode.NONE
            for p in range(PARTITIONS):
                assert await _produce(brokers, p, pid, epoch) == ErrorCode.NONE

            # The coordinator writes PrepareCommit, then stops before any marker is written.
            first.markers.add = lambda *args: None  # type: ignore[method-assign]
            assert await first.end_transaction(tid, pid, epoch, True) == ErrorCode.NONE
            found = first.state.lookup(tid)
            assert found.metadata is not None and found.metadata.state == TxnState.PREPARE_COMMIT
            scope = brokers[old].scope
            assert scope is not None
            scope.cancel()  # no controlled shutdown: its partitions move when its session ends

            others = {i: b for i, b in brokers.items() if i != old}
            new = await eventually(  # (`others` leaves `old` out)
                lambda: _coordinator(others, tid), 60, 0.1, what=f"a new coordinator of {tid}"
            )
            successor = others[new].broker.transactions
            await eventually(
                lambda: (
                    (m := successor.state.lookup(tid).metadata) is not None
                    and m.state == TxnState.COMPLETE_COMMIT
                ),
                timeout=60,
                what="the new coordinator to complete the commit",
            )
            for p in range(PARTITIONS):
                leader = others[new].broker.metadata_cache.partition(TOPIC, p)
                assert leader is not None
                log = others[leader.leader].broker.partition(TOPIC, p)
                assert log is not None
                await eventually(
                    lambda log=log: not log.log.producer_state.has_ongoing_transaction(pid),
                    what=f"the COMMIT marker on {TOPIC}-{p}",
                )
            nursery.cancel_scope.cancel()

    trio.run(main)


async def _coordinator(brokers: dict[int, RunningBroker], tid: str) -> int | None:
    """The coordinator of `tid` if one of `brokers` names one of them (None: none yet)."""
    for running in brokers.values():
        try:
            found = await call(running, FindCoordinatorRequest(key=tid, key_type=1), 3)
        except (OSError, trio.TooSlowError):
            continue
        if found.error_code == ErrorCode.NONE and found.node_id in brokers:
            return int(found.node_id)
    return None


def _leader(brokers: dict[int, RunningBroker], partition: int) -> int:
    info = next(iter(brokers.values())).broker.metadata_cache.partition(TOPIC, partition)
    assert info is not None
    return info.leader


async def _produce(
    brokers: dict[int, RunningBroker], partition: int, pid: int, epoch: int
) -> ErrorCode:
    """One transactional batch of transactional id "prepared" to the partition's leader
    (acks=all); its answer."""
    batch = build_record_batch(
        [SimpleRecord(b"k", b"v%d" % partition, (), int(time.time() * 1000))],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=0,
        is_transactional=True,
    )
    request = ProduceRequest(
        transactional_id="prepared",
        acks=-1,
        timeout_ms=10_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=TOPIC,
                partition_data=[
                    ProduceRequest.PartitionProduceData(index=partition, records=batch)
                ],
            )
        ],
    )
    answer = await call(brokers[_leader(brokers, partition)], request, 9)
    return ErrorCode(answer.responses[0].partition_responses[0].error_code)
