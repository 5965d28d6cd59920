"""Restarts, clean (SIGTERM, Ctrl-C twice) and unclean (kill -9), lose no acknowledged record.

Each test has its own broker process and data directory, since restarting is the test. What is
checked after every restart: each acknowledged record is at the offset it was acknowledged with,
with its key and value; the log is readable and contiguous; topics, partition counts and config
overrides are as they were; and new records continue after the old ones (no offset is reused).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Message, Producer

from protocol.errors import ErrorCode
from protocol.messages.create_partitions import CreatePartitionsRequest
from protocol.messages.delete_topics import DeleteTopicsRequest
from protocol.messages.describe_configs import DescribeConfigsRequest
from protocol.messages.metadata import MetadataRequest
from protocol.record_batch import SimpleRecord
from tests.broker_process import BrokerProcess
from tests.wirebroker.helpers import (
    RawClient,
    create_topic,
    end_offset,
    produce_request,
    read_partition,
)

pytestmark = pytest.mark.integration

PARTITIONS = 3
IN_FLIGHT = 400  # records produced but not yet acknowledged, at most
TIMEOUT = 20.0

Acked = dict[tuple[int, int], tuple[bytes, bytes]]  # (partition, offset) -> (key, value)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", {"log.segment.bytes": "200000"})
    process.start()
    try:
        yield process
    finally:
        process.stop()
    assert not process.tracebacks(), "the broker logged tracebacks:\n" + "\n".join(process.log)


def value_of(i: int) -> bytes:
    """Values of varied sizes (some batches span segments of 200 kB)."""
    return (b"value-%d-" % i) * (1 + (i * 37) % 400)


def produce_until_acked(
    broker: BrokerProcess, topic: str, wanted: int, *, kill_after: bool
) -> Acked:
    """Produce with acks=all until `wanted` records are acknowledged; with `kill_after`, kill -9
    the broker at that moment, with more records in flight. Returns what was acknowledged."""
    acked: Acked = {}
    failed: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is None:
            acked[(msg.partition(), msg.offset())] = (msg.key(), msg.value())
        else:
            failed.append(err)

    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "linger.ms": 2,
            "batch.num.messages": 40,
            "compression.codec": "lz4",
            "enable.idempotence": False,
            "reconnect.backoff.ms": 10_000,  # so it does not find the restarted broker
        }
    )
    i = 0
    deadline = time.monotonic() + TIMEOUT
    while len(acked) < wanted:
        assert time.monotonic() < deadline, f"only {len(acked)} of {wanted} acknowledged"
        if i - len(acked) - len(failed) < IN_FLIGHT:
            key = b"key-%d" % i
            producer.produce(
                topic, value_of(i), key, partition=i % PARTITIONS, on_delivery=on_delivery
            )
            i += 1
        producer.poll(0 if i - len(acked) < IN_FLIGHT else 0.001)
    if kill_after:
        # Make sure records are outstanding at the kill: queue a burst and kill before polling
        # (linger.ms keeps them in the producer for at least 2 ms).
        for j in range(i, i + IN_FLIGHT):
            producer.produce(
                topic, value_of(j), b"key-%d" % j, partition=j % PARTITIONS, on_delivery=on_delivery
            )
        broker.kill()
        producer.purge()  # whatever was not acknowledged by now never will be
        producer.flush(TIMEOUT)
        assert all(
            e.code() in (KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT, KafkaError._TRANSPORT)
            for e in failed
        )
        assert failed, "nothing was in flight at the kill: the test proves nothing"
    else:
        assert producer.flush(TIMEOUT) == 0
        assert not failed, failed
    return acked


def check_log(broker: BrokerProcess, topic: str, acked: Acked) -> dict[int, int]:
    """Every acknowledged record in place, every partition contiguous from 0; the end offsets."""
    ends = {}
    for partition in range(PARTITIONS):
        records = read_partition(broker.bootstrap, topic, partition)
        assert [offset for offset, _, _ in records] == list(range(len(records)))
        stored = {offset: (key, value) for offset, key, value in records}
        for (p, offset), record in acked.items():
            if p == partition:
                assert stored.get(offset) == record, (partition, offset)
        for key, value in stored.values():  # nothing half-written or invented
            assert key is not None and value == value_of(int(key.split(b"-")[1]))
        ends[partition] = len(records)
        assert end_offset(broker.bootstrap, topic, partition) == len(records)
    return ends


def describe_topic(broker: BrokerProcess, topic: str) -> tuple[int, dict[str, str]]:
    """(partition count, config overrides) of a topic."""
    with RawClient(broker.bootstrap) as client:
        metadata = client.request(
            MetadataRequest(
                topics=[MetadataRequest.MetadataRequestTopic(name=topic)],
                allow_auto_topic_creation=False,
            ),
            12,
        )
        configs = client.request(
            DescribeConfigsRequest(
                resources=[
                    DescribeConfigsRequest.DescribeConfigsResource(
                        resource_type=2, resource_name=topic, configuration_keys=None
                    )
                ]
            ),
            4,
        )
    (t,) = metadata.topics
    if t.error_code != ErrorCode.NONE:
        return -1, {}
    overrides = {c.name: c.value for c in configs.results[0].configs if c.config_source == 1}
    return len(t.partitions), overrides


def append_after_restart(broker: BrokerProcess, topic: str, ends: dict[int, int]) -> None:
    """New records get the next offsets: nothing acknowledged before is overwritten."""
    with RawClient(broker.bootstrap) as client:
        for partition, end in ends.items():
            response = client.request(
                produce_request(topic, partition, [SimpleRecord(b"key-0", value_of(0))]), 9
            )
            (p,) = response.responses[0].partition_responses
            assert (p.error_code, p.base_offset) == (ErrorCode.NONE, end)


@pytest.mark.parametrize("clean", [True, False], ids=["sigterm", "kill-9"])
def test_acknowledged_records_survive_a_restart(
    broker: BrokerProcess, topic: str, clean: bool
) -> None:
    create_topic(broker.bootstrap, topic, PARTITIONS, configs={"retention.ms": "86400000"})
    acked = produce_until_acked(broker, topic, 1500, kill_after=False)
    ends = check_log(broker, topic, acked)
    broker.restart(clean=clean)
    assert check_log(broker, topic, acked) == ends
    assert describe_topic(broker, topic) == (PARTITIONS, {"retention.ms": "86400000"})
    append_after_restart(broker, topic, ends)


def test_ctrl_c_twice_stops_it_at_once_and_cleanly(broker: BrokerProcess, topic: str) -> None:
    """An impatient operator: the second Ctrl-C comes while the broker stops. It exits with 0
    and no traceback (trio delivers a signal it did not read again as the loop ends), and
    what was acknowledged is there after a start."""
    create_topic(broker.bootstrap, topic, PARTITIONS)
    acked = produce_until_acked(broker, topic, 300, kill_after=False)
    ends = check_log(broker, topic, acked)
    proc = broker.proc
    assert proc is not None
    proc.send_signal(signal.SIGINT)
    assert broker.wait_for_log("shutting down: writing checkpoints")
    proc.send_signal(signal.SIGINT)
    assert proc.wait(TIMEOUT) == 0, "\n".join(broker.log[-30:])
    broker.proc = None
    broker.start()
    assert check_log(broker, topic, acked) == ends


def test_kill9_while_producing_loses_no_acknowledged_record(
    broker: BrokerProcess, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, PARTITIONS)
    acked = produce_until_acked(broker, topic, 2000, kill_after=True)
    broker.start()
    ends = check_log(broker, topic, acked)
    append_after_restart(broker, topic, ends)
    # And once more, with the recovered log.
    broker.restart(clean=False)
    assert check_log(broker, topic, acked) == {p: end + 1 for p, end in ends.items()}


def test_torn_tail_is_truncated_on_recovery(broker: BrokerProcess, topic: str) -> None:
    """Half a batch at the end of the active segment (a write cut short) is dropped."""
    create_topic(broker.bootstrap, topic, PARTITIONS)
    acked = produce_until_acked(broker, topic, 300, kill_after=False)
    ends = check_log(broker, topic, acked)
    broker.kill()
    partition_dir = broker.data_dir / f"{topic}-0"
    active = max(partition_dir.glob("*.log"))
    whole = (
        produce_request(topic, 0, [SimpleRecord(b"key-1", value_of(1))])
        .topic_data[0]
        .partition_data[0]
        .records
    )
    with open(active, "ab") as f:
        f.write(bytes(whole)[: len(whole) // 2])
        f.flush()
        os.fsync(f.fileno())
    broker.start()
    assert check_log(broker, topic, acked) == ends
    append_after_restart(broker, topic, ends)


def test_topic_changes_survive_kill9(broker: BrokerProcess, topic: str) -> None:
    """The topic registry is written atomically: creations, deletions, partitions, configs."""
    create_topic(broker.bootstrap, topic, 2, configs={"cleanup.policy": "compact"})
    create_topic(broker.bootstrap, topic + "-gone")
    with RawClient(broker.bootstrap) as client:
        more = client.request(
            CreatePartitionsRequest(
                topics=[CreatePartitionsRequest.CreatePartitionsTopic(name=topic, count=4)],
                timeout_ms=10_000,
            ),
            3,
        )
        assert more.results[0].error_code == ErrorCode.NONE
        gone = client.request(
            DeleteTopicsRequest(topic_names=[topic + "-gone"], timeout_ms=10_000), 5
        )
        assert gone.responses[0].error_code == ErrorCode.NONE
    broker.restart(clean=False)
    assert describe_topic(broker, topic) == (4, {"cleanup.policy": "compact"})
    assert describe_topic(broker, topic + "-gone") == (-1, {})
