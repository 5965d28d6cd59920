"""Consumer groups: committed offsets, rebalances, and kafka-consumer-groups.

Group ids are the same on both targets (each target is its own broker), so the Java tool's
output can be compared line by line once the columns that name a member (consumer id,
host, client id) are dropped.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import pytest

from compat.clients import GROUP_COMMAND, Rec, java, produce
from compat.raw import create_topic

RECORDS = [Rec(f"k{i}".encode(), f"v{i}".encode(), (("h", b"1"),)) for i in range(6)]
TIMEOUT = 30.0


def _committed(bootstrap: str, group: str, topic: str, partitions: int = 1) -> list[Any]:
    """The group's committed offsets, read with kafka-python (no join)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        return [consumer.committed(TopicPartition(topic, p)) for p in range(partitions)]
    finally:
        consumer.close(autocommit=False)


def _consume_in_group(client: str, bootstrap: str, topic: str, group: str, n: int) -> list[bytes]:
    """Join ``group``, read ``n`` records, commit what was read, leave; the values read."""
    if client == "kafka-python":
        from kafka import KafkaConsumer, OffsetAndMetadata, TopicPartition

        consumer = KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            consumer_timeout_ms=15_000,
        )
        try:
            values = []
            for m in consumer:
                values.append(m.value)
                if len(values) == n:
                    consumer.commit(
                        {TopicPartition(topic, 0): OffsetAndMetadata(m.offset + 1, "", -1)}
                    )
                    break
            return values
        finally:
            consumer.close(autocommit=False)
    if client == "confluent-kafka":
        from confluent_kafka import Consumer

        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
            }
        )
        try:
            consumer.subscribe([topic])
            values = []
            deadline = time.monotonic() + TIMEOUT
            while len(values) < n and time.monotonic() < deadline:
                m = consumer.poll(0.5)
                if m is None or m.error():
                    continue
                values.append(m.value())
                if len(values) == n:
                    consumer.commit(message=m, asynchronous=False)
            return values
        finally:
            consumer.close()
    if client == "aiokafka":
        from aiokafka import AIOKafkaConsumer, TopicPartition

        async def run() -> list[bytes]:
            consumer = AIOKafkaConsumer(
                topic,
                bootstrap_servers=bootstrap,
                group_id=group,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
            )
            await consumer.start()
            try:
                values = []
                async for m in consumer:
                    values.append(m.value)
                    if len(values) == n:
                        await consumer.commit({TopicPartition(topic, 0): m.offset + 1})
                        break
                return values
            finally:
                await consumer.stop()

        return asyncio.run(asyncio.wait_for(run(), TIMEOUT))
    raise ValueError(client)


@pytest.mark.parametrize("client", ["kafka-python", "confluent-kafka", "aiokafka"])
def test_committed_offsets(client: str, observe: Any) -> None:
    """Read 4 of 6 records in a group and commit; a second member resumes at offset 4."""

    def run(t: Any) -> Any:
        topic, group = f"committed-{client}", f"group-{client}"
        create_topic(t.bootstrap, topic)
        produce("kafka-python", t.bootstrap, topic, RECORDS)
        first = _consume_in_group(client, t.bootstrap, topic, group, 4)
        committed = _committed(t.bootstrap, group, topic)
        rest = _consume_in_group(client, t.bootstrap, topic, group, 2)
        return first, committed, rest, _committed(t.bootstrap, group, topic)

    observe(run)


@pytest.mark.parametrize("client", ["confluent-kafka"])
def test_rebalance(client: str, observe: Any) -> None:
    """One member owns both partitions; a second joins (1+1); it leaves (2 again)."""
    from confluent_kafka import Consumer

    def member(bootstrap: str, group: str, topic: str) -> Any:
        c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "session.timeout.ms": 10_000,
                "heartbeat.interval.ms": 200,
                "partition.assignment.strategy": "range",
            }
        )
        c.subscribe([topic])
        return c

    def settle(members: list[Any], want: list[int]) -> list[list[int]]:
        deadline = time.monotonic() + TIMEOUT
        while True:
            for m in members:
                m.poll(0.1)
            got = [sorted(tp.partition for tp in m.assignment()) for m in members]
            if sorted(len(g) for g in got) == want or time.monotonic() > deadline:
                return sorted(got, key=len)

    def run(t: Any) -> Any:
        topic, group = f"rebalance-{client}", f"rebalance-{client}"
        create_topic(t.bootstrap, topic, partitions=2)
        a = member(t.bootstrap, group, topic)
        alone = settle([a], [2])
        b = member(t.bootstrap, group, topic)
        both = settle([a, b], [1, 1])
        b.close()
        after = settle([a], [2])
        a.close()
        return alone, [len(x) for x in both], sorted(p for x in both for p in x), after

    observe(run)


_MEMBER_COLUMNS = re.compile(r"\s+")


def _table(text: str) -> list[list[str]]:
    """The tool's table rows, first six columns (GROUP .. LAG), blank lines dropped."""
    return [_MEMBER_COLUMNS.split(line.strip())[:6] for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("client", ["java"])
def test_consumer_groups_command(client: str, observe: Any) -> None:
    """kafka-consumer-groups: describe a group's offsets, reset them, describe again."""

    def run(t: Any) -> Any:
        topic, group = "groups-command", "groups-command"
        create_topic(t.bootstrap, topic)
        produce("kafka-python", t.bootstrap, topic, RECORDS)
        _consume_in_group("kafka-python", t.bootstrap, topic, group, 4)
        base = ["--bootstrap-server", t.bootstrap, "--group", group]
        described = java(GROUP_COMMAND, *base, "--describe")
        reset = java(
            GROUP_COMMAND,
            *base,
            "--reset-offsets",
            "--to-offset",
            "1",
            "--topic",
            topic,
            "--execute",
        )
        return _table(described), _table(reset), _committed(t.bootstrap, group, topic)

    observe(run)
