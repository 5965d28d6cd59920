"""Real transactional producers against a broker process: confluent-kafka's (librdkafka's)
init/begin/commit/abort and send_offsets_to_transaction, seen by a read_committed consumer; a
zombie fenced by a second instance with the same transactional.id; a transaction past its
timeout aborted by the coordinator; Kafka's own `kafka-transactions` tool listing and
describing; and Kafka's DumpLogSegments decoding our `__transaction_state` records."""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from compat.kafka_process import jars_available, run_kafka_tool
from protocol.errors import ErrorCode
from tests.broker_process import BrokerProcess
from wirebroker.coordinator_store import partition_for

from .helpers import RawClient, create_topic
from .test_txn_coordinator_wire import describe, offset_fetch, wait_state

pytestmark = pytest.mark.integration

TIMEOUT = 30.0
BROKER_PROPERTIES = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
}


def producer(broker: BrokerProcess, tid: str, **extra: object) -> Producer:
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tid, **extra})
    p.init_transactions(TIMEOUT)
    return p


def open_transaction(
    broker: BrokerProcess, topic: str, value: bytes = b"v", **extra: object
) -> tuple[str, Producer]:
    """A new `topic` and a producer of transactional id `tx-<topic>` whose open transaction
    wrote `value` to partition 0 (flushed): the id and the producer."""
    create_topic(broker.bootstrap, topic)
    tid = f"tx-{topic}"
    p = producer(broker, tid, **extra)
    p.begin_transaction()
    p.produce(topic, value, partition=0)
    p.flush(TIMEOUT)
    return tid, p


def read_committed(
    bootstrap: str,
    topic: str,
    partitions: int,
    count: int,
    timeout: float = TIMEOUT,
    config: dict[str, Any] | None = None,
) -> list[bytes]:
    """Everything a read_committed consumer reads from `topic`, once it has `count` values and
    stands at the end (the last stable offset) of every partition, so that anything more
    would show. `config`: more consumer settings (a login)."""
    c = Consumer(
        {
            **(config or {}),
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:6]}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        seen: list[bytes] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout
        while len(seen) < count or len(at_end) < partitions:
            assert time.monotonic() < deadline, (len(seen), sorted(at_end))
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
                    continue
                raise KafkaException(m.error())
            at_end.discard(m.partition())
            value = m.value()
            assert value is not None
            seen.append(value)
        return seen
    finally:
        c.close()


def test_commit_abort_and_offsets_in_the_transaction(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 2)
    group = f"g-{topic}"
    p = producer(broker, f"tx-{topic}")
    p.begin_transaction()
    for i in range(10):
        p.produce(topic, b"c1-%d" % i, partition=i % 2)
    p.commit_transaction(TIMEOUT)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, b"aborted-%d" % i, partition=i % 2)
    p.flush(TIMEOUT)
    p.abort_transaction(TIMEOUT)
    # consume-transform-produce: the input offsets are committed with the output
    meta = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    p.begin_transaction()
    p.produce(topic, b"c2", partition=0)
    p.send_offsets_to_transaction(
        [TopicPartition(topic, 0, 42), TopicPartition(topic, 1, 7)],
        meta.consumer_group_metadata(),
        TIMEOUT,
    )
    with RawClient(broker.bootstrap) as c:  # not before the commit (and unstable meanwhile)
        assert offset_fetch(c, group, topic, stable=False) == (0, -1)
        assert offset_fetch(c, group, topic, stable=True) == (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1)
    p.commit_transaction(TIMEOUT)
    meta.close()
    assert _committed(broker, group, topic) == {0: 42, 1: 7}
    seen = read_committed(broker.bootstrap, topic, 2, 11)
    assert sorted(seen) == sorted([b"c1-%d" % i for i in range(10)] + [b"c2"])
    # an aborted consume-transform-produce leaves the group's offsets alone
    p.begin_transaction()
    meta = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    p.send_offsets_to_transaction([TopicPartition(topic, 0, 99)], meta.consumer_group_metadata())
    p.abort_transaction(TIMEOUT)
    meta.close()
    assert _committed(broker, group, topic) == {0: 42, 1: 7}


def _committed(broker: BrokerProcess, group: str, topic: str) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        found = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], TIMEOUT)
        return {tp.partition: tp.offset for tp in found}
    finally:
        c.close()


def test_a_zombie_is_fenced(broker: BrokerProcess, topic: str) -> None:
    tid, zombie = open_transaction(broker, topic, b"zombie")
    successor = producer(broker, tid)  # aborts the zombie's transaction, bumps the epoch
    successor.begin_transaction()
    successor.produce(topic, b"successor", partition=0)
    successor.commit_transaction(TIMEOUT)
    with pytest.raises(KafkaException) as raised:
        zombie.produce(topic, b"late", partition=0)
        zombie.commit_transaction(TIMEOUT)
    error = raised.value.args[0]
    assert error.fatal() and error.code() == KafkaError._FENCED, error
    assert read_committed(broker.bootstrap, topic, 1, 1) == [b"successor"]


def test_a_transaction_past_its_timeout_is_aborted(broker: BrokerProcess, topic: str) -> None:
    tid, p = open_transaction(broker, topic, b"too-slow", **{"transaction.timeout.ms": 2000})
    with RawClient(broker.bootstrap) as c:  # the coordinator aborts the transaction
        state = wait_state(c, tid, "CompleteAbort")
    assert state.producer_epoch == 1  # the epoch was bumped: the producer is fenced
    with pytest.raises(KafkaException):
        p.commit_transaction(TIMEOUT)
    assert read_committed(broker.bootstrap, topic, 1, 0) == []


def _tool(broker: BrokerProcess, *args: str) -> str:
    done = run_kafka_tool(
        "org.apache.kafka.tools.TransactionsCommand",
        ["--bootstrap-server", broker.bootstrap, *args],
    )
    return done.stdout.decode()


@pytest.mark.skipif(not jars_available(), reason="no Kafka jars: run `make jars`")
def test_kafka_transactions_tool_lists_and_describes(broker: BrokerProcess, topic: str) -> None:
    tid, p = open_transaction(broker, topic)
    # columns: TransactionalId, Coordinator, ProducerId, TransactionState
    assert _row(_tool(broker, "list"), tid) == [tid, "0", _pid(broker, tid), "Ongoing"]
    described = _tool(broker, "describe", "--transactional-id", tid)
    assert "Ongoing" in described and f"{topic}-0" in described, described
    p.commit_transaction(TIMEOUT)
    with RawClient(broker.bootstrap) as c:
        wait_state(c, tid, "CompleteCommit")
    assert "CompleteCommit" in _tool(broker, "describe", "--transactional-id", tid)
    assert _row(_tool(broker, "list"), tid)[3] == "CompleteCommit"


def _row(table: str, tid: str) -> list[str]:
    return next(cells for line in table.splitlines() if (cells := line.split())[:1] == [tid])


def _pid(broker: BrokerProcess, tid: str) -> str:
    with RawClient(broker.bootstrap) as c:
        return str(describe(c, tid).producer_id)


@pytest.mark.skipif(not jars_available(), reason="no Kafka jars: run `make jars`")
def test_kafka_decodes_the_transaction_log(broker: BrokerProcess, topic: str) -> None:
    """DumpLogSegments --transaction-log-decoder reads every record we wrote, each state."""
    tid, p = open_transaction(broker, topic)
    p.commit_transaction(TIMEOUT)
    with RawClient(broker.bootstrap) as c:
        wait_state(c, tid, "CompleteCommit")
    directory = broker.data_dir / f"__transaction_state-{partition_for(tid, 50)}"
    (segment,) = sorted(directory.glob("*.log"))
    done = run_kafka_tool(
        "kafka.tools.DumpLogSegments",
        ["--files", str(segment), "--print-data-log", "--transaction-log-decoder"],
    )
    out = done.stdout.decode()
    mine = [line for line in out.splitlines() if f"transactionalId={tid} " in line]
    states = [re.search(r"state=(\w+)", line).group(1) for line in mine]  # type: ignore[union-attr]
    assert states == ["Empty", "Ongoing", "PrepareCommit", "CompleteCommit"], out
    assert f"partitions=[{topic}-0]" in mine[1] and "txnTimeoutMs=60000" in mine[1]
