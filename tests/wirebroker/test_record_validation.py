"""Record validation over the wire: poison batches refused with nothing written, per-record
errors in the Produce answer, and the topic configs Kafka 3.9 accepts.

Poison batches are forged from honest ones (a recordsCount of 2^31-1 over two gzip records,
zstd-compressed zeros, zeros labelled zstd, a 512 MiB gzip bomb) and sent with a raw Produce
v9; the partition's log end must not move, and a confluent-kafka consumer must read the
honest records around them.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import pytest
import zstandard
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic, ResourceType

from protocol.compression import CompressionType
from protocol.errors import ErrorCode
from protocol.messages.produce import ProduceRequest, ProduceResponse
from protocol.records import SimpleRecord, build_record_batch
from tests.broker_process import BrokerProcess
from tests.storage.test_validation import INT_MAX, forge
from tests.wirebroker.helpers import BASE_TS, RawClient, create_topic, end_offset

pytestmark = pytest.mark.integration

TIMEOUT = 15.0
MiB = 1024 * 1024


def two_records(compression: int = CompressionType.NONE, tag: bytes = b"a") -> bytearray:
    records = [SimpleRecord(b"k%d" % i, tag + b"%d" % i, (), BASE_TS + i) for i in range(2)]
    return bytearray(build_record_batch(records, compression=compression))


def produce(broker: BrokerProcess, topic: str, records: bytes) -> ProduceResponse:
    request = ProduceRequest(
        acks=1,
        timeout_ms=10_000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records)],
            )
        ],
    )
    with RawClient(broker.bootstrap) as client:
        response: ProduceResponse = client.request(request, 9)
    return response.responses[0].partition_responses[0]


def consume_values(broker: BrokerProcess, topic: str, count: int) -> list[bytes]:
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
        }
    )
    values: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        for _ in range(50):
            if len(values) == count:
                break
            for m in c.consume(count - len(values), timeout=TIMEOUT / 10):
                assert m.error() is None or m.error().code() == KafkaError._PARTITION_EOF, m.error()
                if m.error() is None:
                    values.append(m.value())
    finally:
        c.close()
    return values


def poison_batches() -> Iterator[tuple[str, bytearray, int]]:
    yield (
        "gzip claiming 2^31-1 records",
        forge(two_records(CompressionType.GZIP), count=INT_MAX),
        ErrorCode.INVALID_RECORD,
    )
    yield (
        "zstd of zeros",
        forge(
            two_records(),
            records=zstandard.ZstdCompressor().compress(bytes(4096)),
            codec=CompressionType.ZSTD,
        ),
        ErrorCode.INVALID_RECORD,
    )
    yield (
        "zeros labelled zstd",
        forge(two_records(), records=bytes(4096), codec=CompressionType.ZSTD),
        ErrorCode.CORRUPT_MESSAGE,
    )


def test_poison_batches_are_refused_and_the_partition_stays_readable(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic)
    assert produce(broker, topic, two_records(tag=b"a")).error_code == ErrorCode.NONE
    for what, data, code in poison_batches():
        answer = produce(broker, topic, data)
        assert (answer.error_code, answer.base_offset) == (code, -1), what
        assert answer.error_message, what
        assert end_offset(broker.bootstrap, topic) == 2, what
    assert produce(broker, topic, two_records(CompressionType.ZSTD, b"b")).base_offset == 2
    assert consume_values(broker, topic, 4) == [b"a0", b"a1", b"b0", b"b1"]


def test_a_gzip_bomb_is_refused_at_the_decompression_limit(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic)
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(MiB)
    bomb = b"".join(z.compress(chunk) for _ in range(512)) + z.flush()  # 512 MiB of zeros
    answer = produce(broker, topic, forge(two_records(), records=bomb, codec=CompressionType.GZIP))
    assert answer.error_code == ErrorCode.INVALID_RECORD
    # the message of DecompressionLimitError: refused at the bound (64 x max.message.bytes)
    assert answer.error_message == f"decompressed data exceeds the limit of {64 * 1048588} bytes"
    assert end_offset(broker.bootstrap, topic) == 0


def test_produce_answers_carry_per_record_errors(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, configs={"cleanup.policy": "compact"})
    records = [
        SimpleRecord(b"k", b"v0", (), BASE_TS),
        SimpleRecord(None, b"v1", (), BASE_TS),
        SimpleRecord(None, b"v2", (), BASE_TS),
    ]
    answer = produce(broker, topic, build_record_batch(records))
    assert answer.error_code == ErrorCode.INVALID_RECORD
    assert answer.error_message
    assert [(e.batch_index, e.batch_index_error_message) for e in answer.record_errors] == [
        (1, "compacted topic cannot accept message without key"),
        (2, "compacted topic cannot accept message without key"),
    ]
    assert end_offset(broker.bootstrap, topic) == 0


#: Every topic config of Kafka 3.9's LogConfig, with its default as DescribeConfigs lists it.
KAFKA_39_TOPIC_CONFIGS = {
    "cleanup.policy": "delete",
    "compression.gzip.level": "-1",
    "compression.lz4.level": "9",
    "compression.type": "producer",
    "compression.zstd.level": "3",
    "delete.retention.ms": "86400000",
    "file.delete.delay.ms": "60000",
    "flush.messages": "9223372036854775807",
    "flush.ms": "9223372036854775807",
    "follower.replication.throttled.replicas": "",
    "index.interval.bytes": "4096",
    "leader.replication.throttled.replicas": "",
    "local.retention.bytes": "-2",
    "local.retention.ms": "-2",
    "max.compaction.lag.ms": "9223372036854775807",
    "max.message.bytes": "1048588",
    "message.downconversion.enable": "true",
    "message.format.version": "3.0-IV1",
    "message.timestamp.after.max.ms": "9223372036854775807",
    "message.timestamp.before.max.ms": "9223372036854775807",
    "message.timestamp.difference.max.ms": "9223372036854775807",
    "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": "0.5",
    "min.compaction.lag.ms": "0",
    "min.insync.replicas": "1",
    "preallocate": "false",
    "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false",
    "remote.storage.enable": "false",
    "retention.bytes": "-1",
    "retention.ms": "604800000",
    "segment.bytes": "1073741824",
    "segment.index.bytes": "10485760",
    "segment.jitter.ms": "0",
    "segment.ms": "604800000",
    "unclean.leader.election.enable": "false",
}


def test_every_kafka_topic_config_is_accepted_and_described(
    broker: BrokerProcess, topic: str
) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    overrides = {
        "message.format.version": "2.8-IV1",
        "message.downconversion.enable": "false",
        "leader.replication.throttled.replicas": "0:1,0:2",
        "follower.replication.throttled.replicas": "*",
        "local.retention.ms": "-2",
        "remote.storage.enable": "false",
        "compression.zstd.level": "7",
        "message.timestamp.difference.max.ms": "3600000",
    }
    refused = {
        "remote.storage.enable": "true",
        "message.format.version": "9.x",
        "leader.replication.throttled.replicas": "leader",
        "compression.gzip.level": "0",
        "local.retention.bytes": "-3",
    }
    futures = admin.create_topics(
        [NewTopic(topic, 1, 1, config=overrides)]
        + [
            NewTopic(f"{topic}-{i}", 1, 1, config={k: v})
            for i, (k, v) in enumerate(refused.items())
        ]
    )
    futures[topic].result(TIMEOUT)  # (not popped: the client resolves the futures by name)
    for name, future in futures.items():
        if name == topic:
            continue
        with pytest.raises(Exception) as e:
            future.result(TIMEOUT)
        assert e.value.args[0].code() == KafkaError.INVALID_CONFIG, name

    (future,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    described = {k: (v.value or "", v.source) for k, v in future.result(TIMEOUT).items()}
    expected = {
        k: (v, ConfigSource.DEFAULT_CONFIG.value) for k, v in KAFKA_39_TOPIC_CONFIGS.items()
    }
    expected.update({k: (v, ConfigSource.DYNAMIC_TOPIC_CONFIG.value) for k, v in overrides.items()})
    assert described == expected
