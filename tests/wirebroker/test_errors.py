"""Error codes: unknown topics and partitions, out-of-range offsets, oversize record batches.

The broker here does not auto-create topics and accepts batches of at most 20,000 bytes. Each
error is checked twice: the exact code on the wire (raw requests), and what each client makes
of it (kafka-python, confluent-kafka, aiokafka, kcat). Oversize records are random bytes, so
compression cannot bring them under the limit.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time

import kafka
import kafka.errors
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import TopicPartition as AIOTopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import MessageSizeTooLargeError as AIOMessageSizeTooLargeError
from aiokafka.errors import OffsetOutOfRangeError as AIOOffsetOutOfRangeError
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from protocol.errors import ErrorCode
from protocol.messages.delete_records import DeleteRecordsRequest
from protocol.messages.describe_configs import DescribeConfigsRequest
from protocol.messages.fetch import FetchRequest
from protocol.messages.metadata import MetadataRequest
from protocol.messages.offset_for_leader_epoch import OffsetForLeaderEpochRequest
from protocol.messages.produce import ProduceRequest
from protocol.record_batch import SimpleRecord
from protocol.record_builder import build_record_batch
from tests.broker_process import BrokerProcess
from tests.wirebroker.helpers import (
    RawClient,
    create_topic,
    decode_records,
    end_offset,
    fetch_request,
    list_offset,
    needs_kcat,
    produce_request,
)

pytestmark = pytest.mark.integration

MAX_MESSAGE = 20_000
BROKER_PROPERTIES = {"auto.create.topics.enable": "false", "message.max.bytes": str(MAX_MESSAGE)}
TOO_BIG = 25_000
TIMEOUT = 15.0


def incompressible(size: int) -> bytes:
    return os.urandom(size)


def topic_exists(broker: BrokerProcess, name: str) -> bool:
    with RawClient(broker.bootstrap) as client:
        response = client.request(MetadataRequest(topics=None), 12)
    return name in [t.name for t in response.topics]


# On the wire ------------------------------------------------------------------------------------


def test_unknown_topic_and_partition_codes(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)  # one partition: 0 exists, 5 does not
    unknown = topic + "-missing"
    with RawClient(broker.bootstrap) as client:
        metadata = client.request(
            MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name=unknown)],
                allow_auto_topic_creation=True,  # refused: auto.create.topics.enable=false
            ),
            12,
        )
        assert [(t.name, t.error_code) for t in metadata.topics] == [
            (unknown, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        ]
        for name, partition in ((unknown, 0), (topic, 5)):
            produce = client.request(
                produce_request(name, partition, [SimpleRecord(b"k", b"v")]), 9
            )
            (p,) = produce.responses[0].partition_responses
            assert (p.index, p.error_code, p.base_offset) == (
                partition,
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                -1,
            )
            fetch = client.request(
                FetchRequest(
                    max_wait_ms=0,
                    topics=[
                        FetchRequest.FetchTopic(
                            topic=name,
                            partitions=[FetchRequest.FetchPartition(partition=partition)],
                        )
                    ],
                ),
                12,
            )
            (f,) = fetch.responses[0].partitions
            assert (f.partition_index, f.error_code) == (
                partition,
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            )
            assert list_offset(broker.bootstrap, name, partition, -1) == (
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                -1,
            )
            deleted = client.request(
                DeleteRecordsRequest(
                    topics=[
                        DeleteRecordsRequest.DeleteRecordsTopic(
                            name=name,
                            partitions=[
                                DeleteRecordsRequest.DeleteRecordsPartition(
                                    partition_index=partition, offset=0
                                )
                            ],
                        )
                    ]
                ),
                2,
            )
            assert (
                deleted.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
            epochs = client.request(
                OffsetForLeaderEpochRequest(
                    topics=[
                        OffsetForLeaderEpochRequest.OffsetForLeaderTopic(
                            topic=name,
                            partitions=[
                                OffsetForLeaderEpochRequest.OffsetForLeaderPartition(
                                    partition=partition, leader_epoch=0
                                )
                            ],
                        )
                    ]
                ),
                4,
            )
            assert epochs.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        configs = client.request(
            DescribeConfigsRequest(
                resources=[
                    DescribeConfigsRequest.DescribeConfigsResource(
                        resource_type=2, resource_name=unknown, configuration_keys=None
                    )
                ]
            ),
            4,
        )
        assert configs.results[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert not topic_exists(broker, unknown)


def test_metadata_of_a_name_no_topic_can_have(broker: BrokerProcess, topic: str) -> None:
    """Not auto-created, a missing topic is UNKNOWN_TOPIC_OR_PARTITION (flagged internal when
    its name is an internal topic's: no group or transaction was used here yet) but one whose
    name is illegal is INVALID_TOPIC_EXCEPTION (Kafka's KafkaApis.getTopicMetadata), in every
    version."""
    names = [topic, "__transaction_state", "__consumer_offsets", "bad name!", "..", "a" * 250]
    with RawClient(broker.bootstrap) as client:
        for version in (1, 12):
            response = client.request(
                MetadataRequest(
                    topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names]
                ),
                version,
            )
            got = [(t.name, t.error_code, t.is_internal, t.partitions) for t in response.topics]
            assert got == [
                (topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, False, []),
                ("__transaction_state", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, True, []),
                ("__consumer_offsets", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, True, []),
                ("bad name!", ErrorCode.INVALID_TOPIC_EXCEPTION, False, []),
                ("..", ErrorCode.INVALID_TOPIC_EXCEPTION, False, []),
                ("a" * 250, ErrorCode.INVALID_TOPIC_EXCEPTION, False, []),
            ]


def test_out_of_range_offsets(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    with RawClient(broker.bootstrap) as client:
        for i in range(3):
            client.request(produce_request(topic, 0, [SimpleRecord(b"k", b"v%d" % i)]), 9)

        def fetch(offset: int) -> tuple[int, int, list[tuple[int, bytes | None, bytes | None]]]:
            response = client.request(fetch_request(topic, 0, offset), 12)
            (p,) = response.responses[0].partitions
            return p.error_code, p.log_start_offset, decode_records(p.records)

        assert fetch(3) == (ErrorCode.NONE, 0, [])  # the end: nothing yet, not an error
        for offset in (4, 1000, -1):
            assert fetch(offset)[0] == ErrorCode.OFFSET_OUT_OF_RANGE
        # DeleteRecords moves the log start: offsets below it are out of range too.
        deleted = client.request(
            DeleteRecordsRequest(
                topics=[
                    DeleteRecordsRequest.DeleteRecordsTopic(
                        name=topic,
                        partitions=[
                            DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0, offset=2)
                        ],
                    )
                ]
            ),
            2,
        )
        (d,) = deleted.topics[0].partitions
        assert (d.error_code, d.low_watermark) == (ErrorCode.NONE, 2)
        assert fetch(1)[0] == ErrorCode.OFFSET_OUT_OF_RANGE
        assert fetch(2) == (ErrorCode.NONE, 2, [(2, b"k", b"v2")])
        # DeleteRecords past the high watermark is itself out of range.
        beyond = client.request(
            DeleteRecordsRequest(
                topics=[
                    DeleteRecordsRequest.DeleteRecordsTopic(
                        name=topic,
                        partitions=[
                            DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0, offset=4)
                        ],
                    )
                ]
            ),
            2,
        )
        assert beyond.topics[0].partitions[0].error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert list_offset(broker.bootstrap, topic, 0, -2) == (ErrorCode.NONE, 2)
    assert list_offset(broker.bootstrap, topic, 0, -1) == (ErrorCode.NONE, 3)


def test_oversize_batch_fails_only_its_partition(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 2)
    big = build_record_batch([SimpleRecord(None, incompressible(TOO_BIG))])
    small = build_record_batch([SimpleRecord(b"k", b"fits")])
    request = ProduceRequest(
        acks=-1,
        timeout_ms=10_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    ProduceRequest.PartitionProduceData(index=0, records=big),
                    ProduceRequest.PartitionProduceData(index=1, records=small),
                ],
            )
        ],
    )
    with RawClient(broker.bootstrap) as client:
        response = client.request(request, 9)
    assert [
        (p.index, p.error_code, p.base_offset) for p in response.responses[0].partition_responses
    ] == [
        (0, ErrorCode.MESSAGE_TOO_LARGE, -1),
        (1, ErrorCode.NONE, 0),
    ]
    assert end_offset(broker.bootstrap, topic, 0) == 0
    assert end_offset(broker.bootstrap, topic, 1) == 1


def test_topic_max_message_bytes_overrides_the_broker(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, configs={"max.message.bytes": str(2 * TOO_BIG)})
    value = incompressible(TOO_BIG)
    with RawClient(broker.bootstrap) as client:
        response = client.request(produce_request(topic, 0, [SimpleRecord(None, value)]), 9)
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.NONE


def test_batch_larger_than_a_segment_is_record_list_too_large(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, configs={"segment.bytes": "1000"})
    with RawClient(broker.bootstrap) as client:
        response = client.request(
            produce_request(topic, 0, [SimpleRecord(None, incompressible(5000))]), 9
        )
    assert (
        response.responses[0].partition_responses[0].error_code == ErrorCode.RECORD_LIST_TOO_LARGE
    )


# kafka-python ----------------------------------------------------------------------------------


def test_kafka_python_errors(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    tp = kafka.TopicPartition(topic, 0)
    producer = kafka.KafkaProducer(
        bootstrap_servers=broker.bootstrap, enable_idempotence=False, max_block_ms=1000
    )
    try:
        with pytest.raises(kafka.errors.MessageSizeTooLargeError):
            producer.send(topic, incompressible(TOO_BIG), partition=0).get(timeout=TIMEOUT)
        producer.send(topic, b"fits", partition=0).get(timeout=TIMEOUT)
        # An unknown topic never appears in metadata: the send times out waiting for it.
        with pytest.raises(kafka.errors.KafkaTimeoutError):
            producer.send(topic + "-missing", b"v").get(timeout=TIMEOUT)
    finally:
        producer.close(timeout=10)
    assert not topic_exists(broker, topic + "-missing")
    for reset, expect in (("none", kafka.errors.OffsetOutOfRangeError), ("earliest", None)):
        consumer = kafka.KafkaConsumer(
            bootstrap_servers=broker.bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset=reset,
        )
        try:
            consumer.assign([tp])
            consumer.seek(tp, 5)
            if expect is not None:
                with pytest.raises(expect) as raised:
                    deadline = time.monotonic() + TIMEOUT
                    while time.monotonic() < deadline:
                        consumer.poll(timeout_ms=200)
                assert raised.value.args[0] == {tp: 5}
            else:  # reset to the log start, then read it
                records: list[kafka.consumer.fetcher.ConsumerRecord] = []
                deadline = time.monotonic() + TIMEOUT
                while not records and time.monotonic() < deadline:
                    records = consumer.poll(timeout_ms=200).get(tp, [])
                assert [(r.offset, r.value) for r in records] == [(0, b"fits")]
        finally:
            consumer.close()


# confluent-kafka --------------------------------------------------------------------------------


def test_confluent_errors(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "topic.metadata.propagation.max.ms": 100,
            "message.timeout.ms": 10_000,
        }
    )
    results: dict[str, KafkaError | None] = {}
    producer.produce(topic, incompressible(TOO_BIG), on_delivery=lambda e, m: results.update(big=e))
    assert producer.flush(TIMEOUT) == 0  # else "fits" shares the rejected batch
    producer.produce(topic, b"fits", on_delivery=lambda e, m: results.update(fits=e))
    producer.produce(topic + "-missing", b"v", on_delivery=lambda e, m: results.update(unknown=e))
    assert producer.flush(TIMEOUT) == 0
    assert results["big"] is not None and results["big"].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert results["fits"] is None
    assert results["unknown"] is not None
    assert results["unknown"].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    assert not topic_exists(broker, topic + "-missing")

    for reset in ("error", "earliest"):
        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": "unused",
                "enable.auto.commit": False,
                "auto.offset.reset": reset,
            }
        )
        try:
            consumer.assign([TopicPartition(topic, 0, 5)])
            messages = []
            deadline = time.monotonic() + TIMEOUT
            while not messages and time.monotonic() < deadline:
                messages = consumer.consume(1, timeout=0.2)
            (msg,) = messages
            if reset == "error":
                assert msg.error() is not None
                assert msg.error().code() == KafkaError._AUTO_OFFSET_RESET
                assert "Offset out of range" in msg.error().str()
            else:
                assert msg.error() is None and (msg.offset(), msg.value()) == (0, b"fits")
        finally:
            consumer.close()


# aiokafka ----------------------------------------------------------------------------------------


def test_aiokafka_errors(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)

    async def main() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=False)
        await producer.start()
        try:
            with pytest.raises(AIOMessageSizeTooLargeError):
                await producer.send_and_wait(topic, incompressible(TOO_BIG), partition=0)
            await producer.send_and_wait(topic, b"fits", partition=0)
        finally:
            await producer.stop()
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            (missing,) = await admin.describe_topics([topic + "-missing"])
            assert missing["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        finally:
            await admin.close()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="none",
        )
        await consumer.start()
        try:
            tp = AIOTopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek(tp, 5)
            with pytest.raises(AIOOffsetOutOfRangeError) as raised:
                await asyncio.wait_for(consumer.getone(), TIMEOUT)
            assert raised.value.args[0] == {tp: 5}
        finally:
            await consumer.stop()

    asyncio.run(main())


# kcat ----------------------------------------------------------------------------------------------


def kcat(*args: str, data: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["kcat", *args], input=data, capture_output=True, timeout=TIMEOUT, check=False
    )


@needs_kcat
def test_kcat_errors(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic)
    b = ["-b", broker.bootstrap]
    big = kcat(*b, "-P", "-t", topic, "-p", "0", data=incompressible(TOO_BIG).replace(b"\n", b"-"))
    assert big.returncode != 0
    assert b"Message size too large" in big.stderr
    ok = kcat(*b, "-P", "-t", topic, "-p", "0", data=b"fits\n")
    assert ok.returncode == 0, ok.stderr
    # kcat reports the error, then resets to the end (its auto.offset.reset) and exits.
    beyond = kcat(*b, "-C", "-t", topic, "-p", "0", "-o", "5", "-e")
    assert b"Broker: Offset out of range" in beyond.stderr
    assert b"Reached end of topic %s [0] at offset 1" % topic.encode() in beyond.stderr
    missing = kcat(*b, "-C", "-t", topic + "-missing", "-p", "0", "-o", "beginning", "-e")
    assert missing.returncode != 0
    assert b"Unknown topic or partition" in missing.stderr
