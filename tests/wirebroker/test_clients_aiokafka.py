"""aiokafka against a broker process: produce and consume every kind of record, seek.

Keys, null keys and values, headers, explicit timestamps and every codec; records come back
exactly. Consumers assign and seek (`group_id=None`); each test runs its own asyncio loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from protocol.compression import CompressionType
from tests.broker_process import BrokerProcess
from tests.wirebroker.helpers import (
    BASE_TS,
    CREATE_TIME,
    Sample,
    Seen,
    assert_stored_as_sent,
    create_topic,
    expected,
    sample_records,
)

pytestmark = pytest.mark.integration

TIMEOUT = 15.0


def run(main: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(main(), TIMEOUT * 2))


@asynccontextmanager
async def producer(broker: BrokerProcess, **config: Any) -> AsyncIterator[AIOKafkaProducer]:
    p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=False, **config)
    await p.start()
    try:
        yield p
    finally:
        await p.stop()


@asynccontextmanager
async def consumer(broker: BrokerProcess, **config: Any) -> AsyncIterator[AIOKafkaConsumer]:
    c = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="none",
        **config,
    )
    await c.start()
    try:
        yield c
    finally:
        await c.stop()


async def consume(
    c: AIOKafkaConsumer, start: Mapping[TopicPartition, int], count: int
) -> list[Seen]:
    """Assign, seek each partition to its start, and read until `count` records came."""
    c.assign(list(start))
    for tp, offset in start.items():
        c.seek(tp, offset)
    seen: list[Seen] = []
    while len(seen) < count:
        batches = await asyncio.wait_for(c.getmany(timeout_ms=200), TIMEOUT)
        for records in batches.values():
            seen += [
                Seen(
                    r.partition,
                    r.offset,
                    r.key,
                    r.value,
                    list(r.headers),
                    r.timestamp,
                    r.timestamp_type,
                )
                for r in records
            ]
    return seen[:count]


async def send_all(
    p: AIOKafkaProducer, topic: str, samples: list[Sample], partition: int = 0
) -> list[Any]:
    futures = [
        await p.send(
            topic,
            key=s.key,
            value=s.value,
            headers=list(s.headers),
            partition=partition,
            timestamp_ms=s.timestamp,
        )
        for s in samples
    ]
    return list(await asyncio.gather(*futures))


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_produce_and_consume_every_kind_of_record(
    broker: BrokerProcess, topic: str, codec: str | None
) -> None:
    samples = sample_records()

    async def main() -> None:
        async with producer(broker, compression_type=codec, linger_ms=20) as p:
            acks = await send_all(p, topic, samples)
        # (aiokafka gives every record of a batch the first one's timestamp in its metadata;
        # what the broker stored is checked on the consumer side.)
        assert [(m.partition, m.offset) for m in acks] == [(0, i) for i in range(len(samples))]
        async with consumer(broker) as c:
            assert await consume(c, {TopicPartition(topic, 0): 0}, len(samples)) == expected(
                samples
            )

    run(main)
    stored = CompressionType.NONE if codec is None else CompressionType[codec.upper()]
    assert_stored_as_sent(broker.bootstrap, topic, stored)


def test_one_batch_of_many_records(broker: BrokerProcess, topic: str) -> None:
    """create_batch/send_batch: many records in one v2 batch, offsets assigned in place."""
    create_topic(broker.bootstrap, topic)

    async def main() -> None:
        async with producer(broker, compression_type="zstd") as p:
            meta = await p.send_and_wait(topic, b"first", partition=0, timestamp_ms=BASE_TS)
            assert meta.offset == 0
            batch = p.create_batch()
            for i in range(100):
                assert (
                    batch.append(key=b"%d" % i, value=b"v%d" % i, timestamp=BASE_TS + i, headers=[])
                    is not None
                )
            batch.close()
            meta = await (await p.send_batch(batch, topic, partition=0))
            assert meta.offset == 1
        async with consumer(broker) as c:
            seen = await consume(c, {TopicPartition(topic, 0): 0}, 101)
        assert seen[1:] == [
            Seen(0, 1 + i, b"%d" % i, b"v%d" % i, [], BASE_TS + i, CREATE_TIME) for i in range(100)
        ]

    run(main)


def test_many_partitions(broker: BrokerProcess, topic: str) -> None:
    partitions, per_partition = 20, 3
    create_topic(broker.bootstrap, topic, partitions)

    async def main() -> None:
        async with producer(broker, linger_ms=5) as p:
            assert await p.partitions_for(topic) == set(range(partitions))
            futures = [
                await p.send(
                    topic,
                    key=b"%d" % i,
                    value=b"p%d-%d" % (n, i),
                    partition=n,
                    timestamp_ms=BASE_TS + i,
                )
                for n in range(partitions)
                for i in range(per_partition)
            ]
            acks = await asyncio.gather(*futures)
        assert sorted((m.partition, m.offset) for m in acks) == [
            (n, i) for n in range(partitions) for i in range(per_partition)
        ]
        async with consumer(broker) as c:
            start = {TopicPartition(topic, n): 0 for n in range(partitions)}
            seen = await consume(c, start, partitions * per_partition)
            assert await c.end_offsets(list(start)) == {tp: per_partition for tp in start}
        assert sorted(seen) == [
            Seen(n, i, b"%d" % i, b"p%d-%d" % (n, i), [], BASE_TS + i, CREATE_TIME)
            for n in range(partitions)
            for i in range(per_partition)
        ]

    run(main)


def test_seek_by_offset_and_by_time(broker: BrokerProcess, topic: str) -> None:
    tp = TopicPartition(topic, 0)
    samples = [Sample(b"k%d" % i, b"v%d" % i, [], BASE_TS + 1000 * i) for i in range(10)]

    async def main() -> None:
        async with producer(broker) as p:
            await send_all(p, topic, samples)
        # Short long polls: the offset queries below wait behind the fetch in flight.
        async with consumer(broker, fetch_max_wait_ms=50) as c:
            assert await c.beginning_offsets([tp]) == {tp: 0}
            assert await c.end_offsets([tp]) == {tp: 10}
            assert [r.offset for r in await consume(c, {tp: 8}, 2)] == [8, 9]

            async def by_time(ts: int) -> int | None:
                found = (await c.offsets_for_times({tp: ts}))[tp]
                if found is None:
                    return None
                assert found.timestamp == samples[found.offset].timestamp
                return int(found.offset)

            assert await by_time(0) == 0
            assert await by_time(BASE_TS + 2000) == 2
            assert await by_time(BASE_TS + 2001) == 3
            assert await by_time(BASE_TS + 9001) is None
            (first,) = await consume(c, {tp: await by_time(BASE_TS + 6500) or 0}, 1)
            assert first == Seen(0, 7, b"k7", b"v7", [], BASE_TS + 7000, CREATE_TIME)
            await c.seek_to_beginning(tp)
            assert (await c.getone()).offset == 0

    run(main)
