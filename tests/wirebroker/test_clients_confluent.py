"""confluent-kafka (librdkafka) against a broker process: ApiVersions, produce, consume, seek.

librdkafka negotiates every request version from our ApiVersions answer (`api.version.request`),
so these tests also check that what we advertise is what librdkafka then sends and parses.
Records go out with keys, null keys and values, headers (null header values too), explicit
timestamps and every codec, and come back exactly. Consumers assign explicit offsets.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition

from protocol.compression import CompressionType
from tests.broker_process import BrokerProcess
from tests.wirebroker.helpers import (
    BASE_TS,
    CREATE_TIME,
    Sample,
    Seen,
    advertised_api_keys,
    assert_stored_as_sent,
    create_topic,
    expected,
    sample_records,
)

pytestmark = pytest.mark.integration

TIMEOUT = 15.0
FIND_COORDINATOR = 10


def make_producer(broker: BrokerProcess, **config: Any) -> Producer:
    return Producer({"bootstrap.servers": broker.bootstrap, **config})


@contextmanager
def consumer(broker: BrokerProcess, **config: Any) -> Iterator[Consumer]:
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "unused",  # required by the client; we only assign()
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            **config,
        }
    )
    try:
        yield c
    finally:
        c.close()


def send_all(p: Producer, topic: str, samples: list[Sample], partition: int = 0) -> list[Message]:
    delivered: list[Message] = []

    def on_delivery(err: Any, msg: Message) -> None:
        assert err is None, err
        delivered.append(msg)

    for s in samples:
        p.produce(
            topic,
            value=s.value,
            key=s.key,
            partition=partition,
            timestamp=s.timestamp,
            headers=list(s.headers),
            on_delivery=on_delivery,
        )
    assert p.flush(TIMEOUT) == 0
    assert len(delivered) == len(samples)
    return delivered


def seen(msg: Message) -> Seen:
    ts_type, ts = msg.timestamp()
    headers = [(k, v) for k, v in msg.headers() or []]
    # librdkafka's TIMESTAMP_CREATE_TIME is 1, LOG_APPEND_TIME 2; Kafka's are 0 and 1.
    return Seen(msg.partition(), msg.offset(), msg.key(), msg.value(), headers, ts, ts_type - 1)


def consume(c: Consumer, start: list[TopicPartition], count: int) -> list[Seen]:
    """Assign explicit offsets and poll until `count` records came; errors fail the test."""
    c.assign(start)
    return poll_records(c, count)


def poll_records(c: Consumer, count: int) -> list[Seen]:
    out: list[Seen] = []
    deadline = time.monotonic() + TIMEOUT
    while len(out) < count:
        assert time.monotonic() < deadline, f"only {len(out)} of {count} records arrived"
        for msg in c.consume(count - len(out), timeout=0.2):
            assert msg.error() is None, msg.error()
            out.append(seen(msg))
    return out


def collecting_logger() -> tuple[logging.Logger, list[str]]:
    """A logger for librdkafka's `logger` setting that keeps every message."""
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger(f"librdkafka-{len(_loggers)}")
    _loggers.append(logger)
    logger.addHandler(Collect())
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger, lines


_loggers: list[logging.Logger] = []


def test_api_versions_are_negotiated(broker: BrokerProcess) -> None:
    """With the fallback set to 0.9.0, headers and zstd work only if ApiVersions did."""
    logger, lines = collecting_logger()
    p = make_producer(
        broker,
        **{
            "api.version.request": True,
            "broker.version.fallback": "0.9.0",
            "compression.codec": "zstd",
            "debug": "feature,protocol",
            "logger": logger,
        },
    )
    (msg,) = send_all(p, "negotiated", [Sample(b"k", b"v", [("h", b"1")], BASE_TS)])
    assert (msg.offset(), msg.timestamp()) == (0, (1, BASE_TS))
    text = "\n".join(lines)
    assert "Broker API support:" in text
    assert "ApiKey Produce (0) Versions 0..11" in text
    assert "ApiKey Fetch (1) Versions 0..17" in text
    assert "Enabling feature MsgVer2" in text
    assert "ApiVersionRequest failed" not in text


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_produce_and_consume_every_kind_of_record(
    broker: BrokerProcess, topic: str, codec: str
) -> None:
    samples = sample_records()
    p = make_producer(broker, **{"compression.codec": codec, "linger.ms": 20})
    delivered = send_all(p, topic, samples)
    assert [(m.partition(), m.offset(), m.timestamp()) for m in delivered] == [
        (0, i, (1, s.timestamp)) for i, s in enumerate(samples)
    ]
    with consumer(broker) as c:
        assert consume(c, [TopicPartition(topic, 0, 0)], len(samples)) == expected(samples)
    stored = CompressionType[codec.upper()]
    if codec == "lz4" and FIND_COORDINATOR not in advertised_api_keys(broker.bootstrap):
        # librdkafka takes FindCoordinator as its sign of LZ4 support (Kafka >= 0.8.2); without
        # it, it sends lz4 batches uncompressed.
        stored = CompressionType.NONE
    assert_stored_as_sent(broker.bootstrap, topic, stored)


def test_many_partitions(broker: BrokerProcess, topic: str) -> None:
    partitions, per_partition = 32, 4
    create_topic(broker.bootstrap, topic, partitions)
    p = make_producer(broker, **{"linger.ms": 5})
    assert sorted(p.list_topics(topic, timeout=TIMEOUT).topics[topic].partitions) == list(
        range(partitions)
    )
    samples = {
        n: [Sample(b"k%d" % i, b"p%d-%d" % (n, i), [], BASE_TS + i) for i in range(per_partition)]
        for n in range(partitions)
    }
    for n in range(partitions):
        for s in samples[n]:
            p.produce(topic, value=s.value, key=s.key, partition=n, timestamp=s.timestamp)
    assert p.flush(TIMEOUT) == 0
    with consumer(broker) as c:
        out = consume(
            c, [TopicPartition(topic, n, 0) for n in range(partitions)], partitions * per_partition
        )
    # A consumer with no assignment: a fetching one's queries wait behind its long polls.
    with consumer(broker) as idle:
        for n in range(partitions):
            tp = TopicPartition(topic, n)
            assert idle.get_watermark_offsets(tp, timeout=TIMEOUT) == (0, per_partition)
    assert sorted(out) == [r for n in range(partitions) for r in expected(samples[n], partition=n)]


def test_seek_by_offset_and_by_time(broker: BrokerProcess, topic: str) -> None:
    samples = [Sample(b"k%d" % i, b"v%d" % i, [], BASE_TS + 1000 * i) for i in range(10)]
    send_all(make_producer(broker), topic, samples)
    with consumer(broker) as queries:  # unassigned: no long poll for its queries to wait behind

        def by_time(ts: int) -> int:
            (found,) = queries.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=TIMEOUT)
            assert found.error is None
            return int(found.offset)

        assert by_time(0) == 0
        assert by_time(BASE_TS + 5000) == 5
        assert by_time(BASE_TS + 5001) == 6
        assert by_time(BASE_TS + 9001) == -1  # none: librdkafka reports the end as -1
        assert queries.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT) == (0, 10)
        eight = by_time(BASE_TS + 7500)
    with consumer(broker) as c:
        assert [r.offset for r in consume(c, [TopicPartition(topic, 0, 6)], 4)] == [6, 7, 8, 9]
        c.seek(TopicPartition(topic, 0, 2))  # on an assigned partition
        assert [r.offset for r in poll_records(c, 2)] == [2, 3]
        (first,) = consume(c, [TopicPartition(topic, 0, eight)], 1)
    assert first == Seen(0, 8, b"k8", b"v8", [], BASE_TS + 8000, CREATE_TIME)


def test_consume_from_the_end_waits_for_new_records(broker: BrokerProcess, topic: str) -> None:
    """OFFSET_END resolves through ListOffsets; the long poll then delivers what comes next."""
    p = make_producer(broker)
    send_all(p, topic, [Sample(b"old", b"old", [], BASE_TS)])
    logger, lines = collecting_logger()
    with consumer(broker, debug="topic,fetch", logger=logger) as c:
        c.assign([TopicPartition(topic, 0, -1)])  # OFFSET_END
        resolved = f"Offset END request for {topic} [0] returned offset 1 "
        deadline = time.monotonic() + TIMEOUT
        while not any(resolved in line for line in lines):
            assert time.monotonic() < deadline, "the end offset was never resolved"
            assert c.consume(1, timeout=0.1) == []
        send_all(p, topic, [Sample(b"new", b"new", [], BASE_TS + 1)])
        (msg,) = poll_records(c, 1)
    assert (msg.offset, msg.key) == (1, b"new")
