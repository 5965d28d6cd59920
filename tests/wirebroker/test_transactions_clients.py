"""Real consumers read transactional data written with raw requests (transactional Produce,
EndTxn to the embedded coordinator, commits and aborts interleaved, compressed and multi-record
batches):
confluent-kafka, kafka-python, aiokafka and Kafka's console consumer (Java) each see exactly the
committed records under read_committed -- never an aborted one, never a control record -- and
every data record under read_uncommitted."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, KafkaError
from confluent_kafka import TopicPartition as CkTopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

from compat.kafka_process import jars_available, run_kafka_tool
from protocol.compression import CompressionType
from tests.broker_process import BrokerProcess

from .helpers import RawClient, create_topic
from .test_transactions_wire import BROKER_PROPERTIES as WIRE_PROPERTIES
from .test_transactions_wire import Coordinated, txn_produce

pytestmark = pytest.mark.integration

TIMEOUT = 30.0
BROKER_PROPERTIES = WIRE_PROPERTIES
PLAIN = 1003

COMMITTED = [b"n0", b"a0-0", b"a0-1", b"n1", b"b1-0", b"b1-1", b"b1-2", b"a2-0", b"n2"]
ALL_DATA = [
    b"n0",
    b"a0-0",
    b"a0-1",
    b"b0-0",
    b"a1-0",
    b"n1",
    b"b1-0",
    b"b1-1",
    b"b1-2",
    b"a2-0",
    b"n2",
]


@pytest.fixture(scope="module")
def txn_topic(broker: BrokerProcess) -> str:
    """A partition of committed, aborted and plain batches, every transaction decided."""
    topic = f"txn-clients-{int(time.time() * 1000)}"
    create_topic(broker.bootstrap, topic)
    gzip = {"compression": CompressionType.GZIP}
    plain_seq = 0

    def send(c: RawClient, values: list[bytes]) -> None:
        nonlocal plain_seq
        answer = txn_produce(c, topic, PLAIN, plain_seq, values, transactional=False)
        assert answer.error_code == 0
        plain_seq += len(values)

    with RawClient(broker.bootstrap) as c:
        a, b = Coordinated(c, f"{topic}-a"), Coordinated(c, f"{topic}-b")
        send(c, [b"n0"])
        assert a.produce(topic, [b"a0-0", b"a0-1"], **gzip).error_code == 0
        assert b.produce(topic, [b"b0-0"]).error_code == 0
        a.end(commit=True)
        assert a.produce(topic, [b"a1-0"]).error_code == 0
        send(c, [b"n1"])
        b.end(commit=False)
        assert b.produce(topic, [b"b1-0", b"b1-1", b"b1-2"], **gzip).error_code == 0
        a.end(commit=False)
        b.end(commit=True)
        assert a.produce(topic, [b"a2-0"]).error_code == 0
        a.end(commit=True)
        send(c, [b"n2"])
    return topic


ISOLATION = pytest.mark.parametrize(
    ("isolation", "expected"),
    [("read_committed", COMMITTED), ("read_uncommitted", ALL_DATA)],
)


@ISOLATION
def test_confluent(
    broker: BrokerProcess, txn_topic: str, isolation: str, expected: list[bytes]
) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"txn-{isolation}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([CkTopicPartition(txn_topic, 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                break
            values.append(msg.value() or b"")
        else:
            pytest.fail(f"no end of partition after {TIMEOUT} s; read {values}")
    finally:
        consumer.close()
    assert values == expected


@ISOLATION
def test_kafka_python(
    broker: BrokerProcess, txn_topic: str, isolation: str, expected: list[bytes]
) -> None:
    tp = KpTopicPartition(txn_topic, 0)
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        isolation_level=isolation,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        end = consumer.end_offsets([tp])[tp]
        values: list[bytes] = []
        deadline = time.monotonic() + TIMEOUT
        while consumer.position(tp) < end and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values += [r.value for r in records]
    finally:
        consumer.close()
    assert values == expected


@ISOLATION
def test_aiokafka(
    broker: BrokerProcess, txn_topic: str, isolation: str, expected: list[bytes]
) -> None:
    async def main() -> list[bytes]:
        tp = AioTopicPartition(txn_topic, 0)
        consumer = AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap,
            group_id=None,
            enable_auto_commit=False,
            isolation_level=isolation,
        )
        await consumer.start()
        try:
            consumer.assign([tp])
            consumer.seek(tp, 0)
            end = (await consumer.end_offsets([tp]))[tp]
            values: list[bytes] = []
            while await consumer.position(tp) < end:
                for records in (await consumer.getmany(tp, timeout_ms=500)).values():
                    values += [r.value for r in records if r.value is not None]
            return values
        finally:
            await consumer.stop()

    assert asyncio.run(asyncio.wait_for(main(), TIMEOUT)) == expected


@pytest.mark.skipif(not jars_available(), reason="no Kafka jars: run `make jars`")
@ISOLATION
def test_java_console_consumer(
    broker: BrokerProcess, txn_topic: str, isolation: str, expected: list[bytes]
) -> None:
    """At most len(expected) records: an aborted or control record read would take the place
    of a committed one (the last record is committed plain data)."""
    done = run_kafka_tool(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        ["--bootstrap-server", broker.bootstrap, "--topic", txn_topic, "--partition", "0"]
        + ["--offset", "earliest", "--isolation-level", isolation]
        + ["--max-messages", str(len(expected)), "--timeout-ms", "30000"],
    )
    assert done.stdout.decode().splitlines() == [v.decode() for v in expected]
