"""kafka-python against a broker process: version detection, produce and consume, seeking.

Records go out with keys, null keys and values, headers, explicit timestamps and each codec
(snappy through python-snappy, a test dependency), and come back exactly: offsets, keys, values, headers,
timestamps and timestamp types. Consumers assign and seek (no groups yet).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.protocol.broker_version_data import BROKER_API_VERSIONS

from protocol.compression import CompressionType
from protocol.errors import ErrorCode
from protocol.messages.api_versions import ApiVersionsRequest
from protocol.messages.metadata import MetadataRequest
from tests.broker_process import BrokerProcess
from tests.wirebroker.helpers import (
    BASE_TS,
    CREATE_TIME,
    LOG_APPEND_TIME,
    RawClient,
    Sample,
    Seen,
    assert_stored_as_sent,
    create_topic,
    expected,
    sample_records,
)

pytestmark = pytest.mark.integration


@contextmanager
def producer(broker: BrokerProcess, **config: Any) -> Iterator[KafkaProducer]:
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=False, **config)
    try:
        yield p
    finally:
        p.close(timeout=10)


@contextmanager
def consumer(broker: BrokerProcess, **config: Any) -> Iterator[KafkaConsumer]:
    c = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False, **config
    )
    try:
        yield c
    finally:
        c.close()


def consume(
    c: KafkaConsumer, start: Mapping[TopicPartition, int], count: int, timeout: float = 15
) -> list[Seen]:
    """Assign, seek each partition to its start offset, poll: the first `count` records."""
    c.assign(list(start))
    for tp, offset in start.items():
        c.seek(tp, offset)
    seen: list[Seen] = []
    deadline = time.monotonic() + timeout
    while len(seen) < count:
        assert time.monotonic() < deadline, f"only {len(seen)} of {count} records arrived"
        for records in c.poll(timeout_ms=200).values():
            seen += [
                Seen(
                    r.partition,
                    r.offset,
                    r.key,
                    r.value,
                    [(k, v) for k, v in r.headers],
                    r.timestamp,
                    r.timestamp_type,
                )
                for r in records
            ]
    return seen[:count]


def send_all(p: KafkaProducer, topic: str, samples: list[Sample], partition: int = 0) -> list[Any]:
    futures = [
        p.send(
            topic,
            key=s.key,
            value=s.value,
            headers=list(s.headers),
            partition=partition,
            timestamp_ms=s.timestamp,
        )
        for s in samples
    ]
    p.flush(timeout=10)
    return [f.get(timeout=10) for f in futures]


def test_detects_kafka_3_9(broker: BrokerProcess) -> None:
    with producer(broker) as p:
        assert p.config["api_version"] == (3, 9)
    # And each advertised range is the one a real Kafka 3.9 broker advertises.
    real = BROKER_API_VERSIONS[(3, 9)]
    with RawClient(broker.bootstrap) as client:
        response = client.request(ApiVersionsRequest(), 0)
    for k in response.api_keys:
        assert (k.min_version, k.max_version) == real[k.api_key], k


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_produce_and_consume_every_kind_of_record(
    broker: BrokerProcess, topic: str, codec: str | None
) -> None:
    samples = sample_records(null_header_values=False)
    with producer(broker, compression_type=codec, linger_ms=20) as p:
        acks = send_all(p, topic, samples)
    assert [(m.partition, m.offset, m.timestamp) for m in acks] == [
        (0, i, s.timestamp) for i, s in enumerate(samples)
    ]
    with consumer(broker) as c:
        seen = consume(c, {TopicPartition(topic, 0): 0}, len(samples))
    assert seen == expected(samples)
    stored = CompressionType.NONE if codec is None else CompressionType[codec.upper()]
    assert_stored_as_sent(broker.bootstrap, topic, stored)


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_acks(broker: BrokerProcess, topic: str, acks: int | str) -> None:
    create_topic(broker.bootstrap, topic)
    with producer(broker, acks=acks) as p:
        meta = p.send(topic, key=b"k", value=b"v", timestamp_ms=BASE_TS).get(timeout=10)
    if acks != 0:  # with acks=0 kafka-python makes an answer up (offset 0)
        assert meta.offset == 0
    with consumer(broker) as c:
        (seen,) = consume(c, {TopicPartition(topic, 0): 0}, 1)
    assert seen == Seen(0, 0, b"k", b"v", [], BASE_TS, CREATE_TIME)


def test_many_partitions(broker: BrokerProcess, topic: str) -> None:
    partitions, per_partition = 24, 5
    create_topic(broker.bootstrap, topic, partitions)
    with producer(broker, linger_ms=5) as p:
        assert p.partitions_for(topic) == set(range(partitions))
        futures = [
            p.send(
                topic,
                key=b"%d" % i,
                value=b"p%d-%d" % (n, i),
                partition=n,
                timestamp_ms=BASE_TS + i,
            )
            for i in range(per_partition)
            for n in range(partitions)
        ]
        acks = [f.get(timeout=10) for f in futures]
    assert sorted((m.partition, m.offset) for m in acks) == [
        (n, i) for n in range(partitions) for i in range(per_partition)
    ]
    with consumer(broker) as c:
        start = {TopicPartition(topic, n): 0 for n in range(partitions)}
        seen = consume(c, start, partitions * per_partition)
        assert c.end_offsets(list(start)) == {tp: per_partition for tp in start}
    assert sorted(seen) == [
        Seen(n, i, b"%d" % i, b"p%d-%d" % (n, i), [], BASE_TS + i, CREATE_TIME)
        for n in range(partitions)
        for i in range(per_partition)
    ]


def test_seek_by_offset_and_by_time(broker: BrokerProcess, topic: str) -> None:
    tp = TopicPartition(topic, 0)
    samples = [Sample(b"k%d" % i, b"v%d" % i, [], BASE_TS + 1000 * i) for i in range(10)]
    with producer(broker) as p:
        send_all(p, topic, samples)
    with consumer(broker) as c:
        assert c.beginning_offsets([tp]) == {tp: 0}
        assert c.end_offsets([tp]) == {tp: 10}
        assert [r.offset for r in consume(c, {tp: 7}, 3)] == [7, 8, 9]
        assert [r.offset for r in consume(c, {tp: 0}, 10)] == list(range(10))

        def by_time(ts: int) -> int | None:
            found = c.offsets_for_times({tp: ts})[tp]
            if found is None:
                return None
            assert found.timestamp == samples[found.offset].timestamp
            return int(found.offset)

        assert by_time(0) == 0
        assert by_time(BASE_TS + 3000) == 3
        assert by_time(BASE_TS + 3001) == 4
        assert by_time(BASE_TS + 9000) == 9
        assert by_time(BASE_TS + 9001) is None
        (seen,) = consume(c, {tp: by_time(BASE_TS + 4500) or 0}, 1)
        assert seen.offset == 5 and seen.value == b"v5"


def test_log_append_time_topic(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, configs={"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    with producer(broker) as p:
        meta = p.send(topic, value=b"v", timestamp_ms=BASE_TS).get(timeout=10)
    after = int(time.time() * 1000)
    assert before <= meta.timestamp <= after
    with consumer(broker) as c:
        (seen,) = consume(c, {TopicPartition(topic, 0): 0}, 1)
    assert (seen.timestamp, seen.timestamp_type) == (meta.timestamp, LOG_APPEND_TIME)


def test_record_larger_than_the_fetch_sizes_is_still_returned(
    broker: BrokerProcess, topic: str
) -> None:
    """KIP-74: the first batch is returned whole even when over the fetch byte limits."""
    value = bytes(range(256)) * 3000  # 768,000 bytes, under message.max.bytes
    with producer(broker, max_request_size=2 << 20) as p:
        p.send(topic, value=value, timestamp_ms=BASE_TS).get(timeout=10)
    with consumer(broker, max_partition_fetch_bytes=65_536, fetch_max_bytes=65_536) as c:
        (seen,) = consume(c, {TopicPartition(topic, 0): 0}, 1)
    assert seen.value == value


def test_a_topic_auto_created_by_metadata(broker: BrokerProcess, topic: str) -> None:
    """As Kafka: the Metadata that creates a topic answers LEADER_NOT_AVAILABLE without
    partitions, the next one lists them; a producer sending to a new topic retries and succeeds."""
    wanted = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=True
    )
    with RawClient(broker.bootstrap) as client:
        (first,) = client.request(wanted, 12).topics
        assert (first.error_code, first.partitions) == (ErrorCode.LEADER_NOT_AVAILABLE, [])
        (second,) = client.request(wanted, 12).topics
        assert second.error_code == ErrorCode.NONE and len(second.partitions) == 1
    with producer(broker) as p:
        sent = p.send(f"{topic}-by-producer", b"first").get(timeout=30)
    assert (sent.partition, sent.offset) == (0, 0)
