"""A full disk with a real broker process: it degrades to read-only and recovers by itself.

The broker's log directory is on a 16 MiB tmpfs (mounting needs root: the test is skipped
otherwise). Produce fills it until KAFKA_STORAGE_ERROR; the broker stays up, its checkpoint timer
(shortened by `log.flush.offset.checkpoint.interval.ms`) fails without killing it, a real
consumer still fetches every acknowledged record, and once a filler file is deleted produce
succeeds again without a restart. A shutdown on a full disk leaves out the clean-shutdown
marker, and the restart (which recovers) finds exactly the acknowledged records.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition

from protocol.errors import ErrorCode
from protocol.record_batch import SimpleRecord
from tests.broker_process import BrokerProcess
from tests.wirebroker.helpers import (
    RawClient,
    create_topic,
    fill,
    produce_request,
    read_partition,
)

pytestmark = pytest.mark.integration

VALUE = 20_000  # bytes per record: about 50 per 1 MiB segment
FILLER = 2 * 1024 * 1024


def produce(client: RawClient, i: int) -> tuple[int, int]:
    """(error code, base offset) of one acks=all produce of record `i`."""
    record = SimpleRecord(b"k%d" % i, bytes([i % 251]) * VALUE)
    response = client.request(produce_request("t", 0, [record]), 9)
    p = response.responses[0].partition_responses[0]
    return p.error_code, p.base_offset


def consume_all(bootstrap: str, count: int, timeout: float = 20.0) -> dict[int, bytes]:
    """offset -> key of the first `count` records, read by kafka-python from offset 0."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        tp = TopicPartition("t", 0)
        c.assign([tp])
        c.seek(tp, 0)
        seen: dict[int, bytes] = {}
        deadline = time.monotonic() + timeout
        while len(seen) < count:
            assert time.monotonic() < deadline, f"only {len(seen)} of {count} records arrived"
            for records in c.poll(timeout_ms=200).values():
                for r in records:
                    assert r.value == bytes([r.offset % 251]) * VALUE
                    seen[r.offset] = r.key
        return seen
    finally:
        c.close()


def test_a_full_disk_degrades_to_read_only_and_recovers(disk: Path) -> None:
    filler = disk / "filler"
    filler.write_bytes(bytes(FILLER))
    broker = BrokerProcess(
        disk / "data",
        {"log.segment.bytes": "1048576", "log.flush.offset.checkpoint.interval.ms": "200"},
    )
    broker.start()
    try:
        create_topic(broker.bootstrap, "t")
        acked: dict[int, bytes] = {}
        with RawClient(broker.bootstrap) as client:
            for i in range(1000):
                code, offset = produce(client, i)
                if code != ErrorCode.NONE:
                    break
                acked[offset] = b"k%d" % i
            assert code == ErrorCode.KAFKA_STORAGE_ERROR, code
            assert len(acked) > 100 and sorted(acked) == list(range(len(acked)))
            # Take the last free pages too: the checkpoint timer now fails every time.
            fill(disk / "rest")
            failed = broker.wait_for_log("cannot write the checkpoints", since=len(broker.log))
            assert failed, "the checkpoint timer did not run"
            again = broker.log.index(failed) + 1
            assert broker.wait_for_log("cannot write the checkpoints", since=again)
            assert produce(client, 10_000)[0] == ErrorCode.KAFKA_STORAGE_ERROR
            assert broker.alive()
            assert consume_all(broker.bootstrap, len(acked)) == acked

            (disk / "rest").unlink()
            filler.unlink()
            code, offset = produce(client, len(acked))
            assert (code, offset) == (ErrorCode.NONE, len(acked))  # no restart, no gap
            acked[offset] = b"k%d" % offset
        assert broker.alive()
        assert consume_all(broker.bootstrap, len(acked)) == acked
        # A shutdown on a full disk cannot write its checkpoints: it leaves out the
        # clean-shutdown marker, and the next start recovers.
        fill(disk / "rest")
        assert broker.stop() == 0
        assert not (disk / "data" / ".kafka_cleanshutdown").exists()
        (disk / "rest").unlink()
        broker.start()
        stored = read_partition(broker.bootstrap, "t")
        assert {o: k for o, k, _v in stored} == acked
        assert broker.stop() == 0
        assert (disk / "data" / ".kafka_cleanshutdown").exists()
    finally:
        broker.stop()
    assert not broker.tracebacks(), "\n".join(broker.log)
