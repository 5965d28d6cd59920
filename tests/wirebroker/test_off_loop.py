"""The event loop never waits on the disk: requests are answered while storage chores run.

One trio thread serves every connection; the slow part of each storage chore (the fsync of a
rolled segment, a compaction pass, checkpoints, removing a deleted topic's files) runs in a
worker thread. Here a real broker fsyncs a rolled 64 MiB segment and compacts a topic of
100,000 records while a client keeps timing Metadata round trips: when the broker compacted
on its loop, one took 3.5 s; now the slowest takes 0.1-0.35 s on a busy 2-core machine.
"""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import Producer

from protocol.errors import ErrorCode
from protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from protocol.messages.metadata import MetadataRequest
from tests.broker_process import BrokerProcess
from tests.wirebroker.helpers import RawClient, create_topic

pytestmark = pytest.mark.integration

BROKER_PROPERTIES = {"log.cleaner.backoff.ms": "200"}

#: A Metadata round trip must stay under this (generous for a loaded 2-core machine).
BOUND_S = 1.0
COMPACTED_RECORDS = 100_000
KEYS = 1000
FLUSHED_BYTES = 64 * 1024 * 1024
TIMEOUT = 45.0


def _produce(broker: BrokerProcess, topic: str, count: int, value: bytes, keys: int) -> None:
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "acks": 1,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    for i in range(count):
        producer.produce(topic, value, b"key%d" % (i % keys) if keys else None)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(TIMEOUT) == 0


def _roll(broker: BrokerProcess, *topics: str) -> None:
    """Shrink segment.bytes so that the next append rolls the (big) active segment."""
    request = IncrementalAlterConfigsRequest(
        resources=[
            IncrementalAlterConfigsRequest.AlterConfigsResource(
                resource_type=2,
                resource_name=topic,
                configs=[
                    IncrementalAlterConfigsRequest.AlterableConfig(
                        name="segment.bytes", config_operation=0, value="1048576"
                    )
                ],
            )
            for topic in topics
        ]
    )
    with RawClient(broker.bootstrap) as client:
        response = client.request(request, 1)
    assert all(r.error_code == ErrorCode.NONE for r in response.responses)
    for topic in topics:
        _produce(broker, topic, 1, b"roll", 1)


class _Prober(threading.Thread):
    """Times Metadata round trips back to back until stopped."""

    def __init__(self, broker: BrokerProcess) -> None:
        super().__init__(daemon=True)
        self.client = RawClient(broker.bootstrap, timeout=TIMEOUT)
        self.stopped = threading.Event()
        self.round_trips: list[float] = []

    def run(self) -> None:
        with self.client:
            while not self.stopped.is_set():
                started = time.monotonic()
                self.client.request(MetadataRequest(topics=None), 12)
                self.round_trips.append(time.monotonic() - started)
                self.stopped.wait(0.01)


def test_metadata_answers_while_flushing_and_compacting(broker: BrokerProcess) -> None:
    compacted, flushed = "off-loop-compacted", "off-loop-flushed"
    create_topic(
        broker.bootstrap,
        compacted,
        configs={"cleanup.policy": "compact", "segment.bytes": str(1 << 30)},
    )
    create_topic(broker.bootstrap, flushed, configs={"segment.bytes": str(1 << 30)})
    _produce(broker, compacted, COMPACTED_RECORDS, b"v" * 50, KEYS)
    _produce(broker, flushed, FLUSHED_BYTES // 100_000, b"x" * 100_000, 0)
    since = len(broker.log)
    prober = _Prober(broker)
    prober.start()
    try:
        _roll(broker, flushed, compacted)  # the flush and the cleaner now have work
        assert broker.wait_for_log("compacted", TIMEOUT, since), "no compaction ran"
    finally:
        prober.stopped.set()
        prober.join(TIMEOUT)
    assert not prober.is_alive()
    slowest = max(prober.round_trips)
    assert slowest < BOUND_S, f"a Metadata round trip took {slowest:.2f} s"
    assert len(prober.round_trips) > 10
