"""A deleted topic leaves no reference cycle behind.

`wirebroker serve` freezes its heap (`wirebroker.gc_freeze`): a cycle that becomes garbage there
is never collected, so whatever a deleted topic leaves in one (its partitions, logs, segments,
indexes, file handles, its groups' offsets) would stay until a restart, and a broker whose
topics come and go (test suites, short-lived pipelines) would grow without end. Here an
in-process broker creates topics, writes, reads and commits, and deletes them; then a collection that keeps what it finds must find no object
of the broker's own classes: they were all freed by reference counting.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.wirebroker.helpers import serving_in_process, wait_until
from wirebroker.config import BrokerConfig

pytestmark = pytest.mark.integration

TOPICS = 3
RECORDS = 60
TXN_RECORDS = 10
OURS = ("wirebroker.", "storage.", "protocol.")


@pytest.fixture
def collector_paused() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def _use_and_delete(bootstrap: str, data: Path) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for i in range(TOPICS):
        topic = f"short-lived-{i}"
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(15)
        producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "batch.num.messages": 5,  # batches under a segment's size
            }
        )
        for n in range(RECORDS):
            producer.produce(topic, value=b"x" * 100, partition=n % 2)
        assert producer.flush(15) == 0
        transactional = Producer({"bootstrap.servers": bootstrap, "transactional.id": "short"})
        transactional.init_transactions(15)
        transactional.begin_transaction()
        for n in range(TXN_RECORDS):
            transactional.produce(topic, value=b"t", partition=n % 2)
        transactional.commit_transaction(15)
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "readers",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        try:
            consumer.subscribe([topic])
            seen = 0
            deadline = time.monotonic() + 30
            while seen < RECORDS + TXN_RECORDS and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    seen += 1
            assert seen == RECORDS + TXN_RECORDS
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        admin.delete_topics([topic])[topic].result(15)
    # every deleted partition's directory removed
    wait_until(lambda: not list(data.glob("short-lived-*")))


@pytest.mark.timeout(120)
def test_a_deleted_topic_leaves_no_reference_cycle(tmp_path: Path, collector_paused: None) -> None:
    config = BrokerConfig.from_properties(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": str(tmp_path),
            "offsets.topic.num.partitions": "1",
            "log.segment.bytes": "1024",  # a few segments a partition
            "file.delete.delay.ms": "0",
        }
    )

    async def main() -> None:
        async with serving_in_process(config, threading.Event(), 100) as running:
            await trio.to_thread.run_sync(_use_and_delete, running.bootstrap_servers, tmp_path)
            gc.set_debug(gc.DEBUG_SAVEALL)
            gc.collect()
            left = sorted(
                {
                    f"{type(o).__module__}.{type(o).__qualname__}"
                    for o in gc.garbage
                    if type(o).__module__.startswith(OURS)
                }
            )
            assert left == [], f"cycles of the broker's objects left to the collector: {left}"

    trio.run(main)
