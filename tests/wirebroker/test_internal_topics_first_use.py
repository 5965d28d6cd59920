"""The coordinators' topics made on first use off the event loop, as Kafka answers meanwhile.

- An in-process broker whose making of `__consumer_offsets` is held in its worker thread: a
  confluent-kafka consumer group's first use (its FindCoordinator created the topic) waits;
  meanwhile the loop answers Metadata, FindCoordinator answers COORDINATOR_NOT_AVAILABLE (as
  Kafka's until the partition has a leader) and OffsetFetch NOT_COORDINATOR. Once released the
  consumer reads, commits, and its commit is fetched back.
- The same for `__transaction_state` and a transactional producer (InitProducerId answers
  NOT_COORDINATOR meanwhile): once released it commits a transaction, a group's offset
  included, read back read_committed.
- A broker process whose disk has no inode left: the group's first use cannot make the logs
  (logged, FindCoordinator answers COORDINATOR_NOT_AVAILABLE, no directory left behind); once
  space returns the next lookup makes them and a commit survives a restart.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
import trio
from confluent_kafka import Consumer, Producer, TopicPartition

from protocol.errors import ErrorCode
from protocol.messages.find_coordinator import FindCoordinatorRequest
from protocol.messages.init_producer_id import InitProducerIdRequest
from protocol.messages.offset_fetch import OffsetFetchRequest
from protocol.record_batch import SimpleRecord
from tests.broker_process import BrokerProcess
from tests.wirebroker.helpers import (
    RawClient,
    create_topic,
    end_offset,
    held_in_process,
    produce_request,
    serving_in_process,
)
from tests.wirebroker.test_partition_create import metadata_of
from wirebroker.topics import OFFSETS_TOPIC, TXN_TOPIC

pytestmark = pytest.mark.integration

TIMEOUT = 60.0
GROUP_KEY, TXN_KEY = 0, 1


def _coordinator(bootstrap: str, key: str, key_type: int) -> int:
    with RawClient(bootstrap, timeout=TIMEOUT) as c:
        return int(c.request(FindCoordinatorRequest(key=key, key_type=key_type), 3).error_code)


def _offset_fetch_error(bootstrap: str, group: str) -> int:
    with RawClient(bootstrap, timeout=TIMEOUT) as c:
        return int(c.request(OffsetFetchRequest(group_id=group, topics=None), 7).error_code)


def _init_producer_id_error(bootstrap: str, transactional_id: str) -> int:
    request = InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout_ms=60_000
    )
    with RawClient(bootstrap, timeout=TIMEOUT) as c:
        return int(c.request(request, 4).error_code)


def _produce(bootstrap: str, topic: str, count: int) -> None:
    with RawClient(bootstrap, timeout=TIMEOUT) as c:
        response = c.request(produce_request(topic, 0, [SimpleRecord(b"k", b"v")] * count), 9)
    assert response.responses[0].partition_responses[0].error_code == ErrorCode.NONE


def _consume_and_commit(bootstrap: str, group: str, topic: str) -> int | None:
    """A group member reads one record and commits after it: the committed offset fetched."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT
        message = None
        while message is None or message.error() is not None:
            assert time.monotonic() < deadline, "no record arrived"
            message = consumer.poll(0.5)
        consumer.commit(message=message, asynchronous=False)
        (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=TIMEOUT)
        return committed.offset
    finally:
        consumer.close()


def _committed(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=TIMEOUT)
        return int(committed.offset)
    finally:
        consumer.close()


def _transaction(bootstrap: str, transactional_id: str, topic: str, group: str) -> int:
    """Init (the first use of `__transaction_state`), then one committed transaction with a
    record and the group's offset; the number of records produced."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    group_member = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        producer.init_transactions(TIMEOUT)
        # Read where the group is, as a consume-transform-produce loop starts (its lookup
        # makes `__consumer_offsets`, not held).
        group_member.committed([TopicPartition(topic, 0)], timeout=TIMEOUT)
        producer.begin_transaction()
        producer.produce(topic, b"committed", partition=0)
        producer.send_offsets_to_transaction(
            [TopicPartition(topic, 0, 2)], group_member.consumer_group_metadata(), TIMEOUT
        )
        producer.commit_transaction(TIMEOUT)
        return 1
    finally:
        group_member.close()


def _first_use_held(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    topic: str,
    use: Callable[[str], int | None],
    while_held: Callable[[str], None],
    then: Callable[[str], None],
) -> None:
    """A broker whose making of `topic` is held in its worker thread; a client's `use` (whose
    first use makes `topic`) runs meanwhile; `while_held` checks the loop's answers while it is
    held (the topic's partitions not served yet), then it is released: `use` answers 1, and
    `then` checks what it did. The topic's logs were made in one call, off the loop."""
    config, held = held_in_process(tmp_path, monkeypatch, topic)

    async def main() -> None:
        async with serving_in_process(config, held.release, 2 * TIMEOUT) as running:
            bootstrap = running.bootstrap_servers
            await trio.to_thread.run_sync(create_topic, bootstrap, "t")
            await trio.to_thread.run_sync(_produce, bootstrap, "t", 1)
            async with trio.open_nursery() as using:
                using.start_soon(held.ask, "use", partial(use, bootstrap))
                assert await trio.to_thread.run_sync(held.started.wait, TIMEOUT)
                for _ in range(3):
                    meta = await trio.to_thread.run_sync(metadata_of, bootstrap, "t")
                    assert meta == (ErrorCode.NONE, 1)
                await trio.to_thread.run_sync(while_held, bootstrap)
                assert "use" not in held.answers
                assert running.broker.partition(topic, 0) is None
                held.release.set()
            assert held.answers == {"use": 1}
            await trio.to_thread.run_sync(then, bootstrap)

    loop_thread = threading.get_ident()
    trio.run(main)
    assert held.counted == 1  # the topic's logs made in one call
    assert loop_thread not in {thread for thread, _n in held.calls}


@pytest.mark.timeout(180)
def test_a_consumer_group_first_use_waits_off_the_loop_for_its_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def while_held(bootstrap: str) -> None:
        assert _coordinator(bootstrap, "g", GROUP_KEY) == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert _offset_fetch_error(bootstrap, "g") == ErrorCode.NOT_COORDINATOR

    def then(bootstrap: str) -> None:
        assert _committed(bootstrap, "g", "t") == 1

    _first_use_held(
        tmp_path,
        monkeypatch,
        OFFSETS_TOPIC,
        lambda bootstrap: _consume_and_commit(bootstrap, "g", "t"),
        while_held,
        then,
    )


@pytest.mark.timeout(180)
def test_a_transactional_producer_first_use_waits_off_the_loop_for_its_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def while_held(bootstrap: str) -> None:
        assert _coordinator(bootstrap, "tx", TXN_KEY) == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert _init_producer_id_error(bootstrap, "tx") == ErrorCode.NOT_COORDINATOR

    def then(bootstrap: str) -> None:
        # The plain record, the transaction's and its commit marker, stable; the offset
        # committed with it.
        assert end_offset(bootstrap, "t", 0, 1) == 3
        assert _committed(bootstrap, "g", "t") == 2

    _first_use_held(
        tmp_path,
        monkeypatch,
        TXN_TOPIC,
        lambda bootstrap: _transaction(bootstrap, "tx", "t", "g"),
        while_held,
        then,
    )


@pytest.mark.timeout(180)
def test_a_first_use_on_a_full_disk_is_refused_then_works(few_inodes_disk: Path) -> None:
    data = few_inodes_disk / "data"
    broker = BrokerProcess(data, {"offsets.topic.num.partitions": "5"})
    broker.start()
    try:
        create_topic(broker.bootstrap, "t")
        fillers = few_inodes_disk / "fillers"
        fillers.mkdir()
        with pytest.raises(OSError, match="No space left"):
            for i in range(1000):
                (fillers / str(i)).touch()
        since = len(broker.log)
        assert _coordinator(broker.bootstrap, "g", GROUP_KEY) == ErrorCode.COORDINATOR_NOT_AVAILABLE
        line = broker.wait_for_log("cannot create __consumer_offsets on its first use", since=since)
        assert line is not None and "No space left on device" in line
        # Tried again at each use, and answered the same while the disk is full.
        since = len(broker.log)
        assert _coordinator(broker.bootstrap, "g", GROUP_KEY) == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert broker.wait_for_log("cannot create __consumer_offsets", since=since)
        assert not [p for p in os.listdir(data) if p.startswith(OFFSETS_TOPIC)]  # nothing left
        for filler in fillers.iterdir():
            filler.unlink()
        _produce(broker.bootstrap, "t", 5)
        assert _consume_and_commit(broker.bootstrap, "g", "t") == 1
        broker.restart()
        assert _committed(broker.bootstrap, "g", "t") == 1
        assert not list(data.glob("*-stray"))
    finally:
        broker.stop()
    assert not broker.tracebacks(), "\n".join(broker.log)


@pytest.mark.timeout(180)
def test_a_first_use_whose_logs_are_not_all_made_serves_none_of_them(
    few_inodes_disk: Path,
) -> None:
    """The registry's write succeeds but the disk runs out of inodes after two of five
    partitions' logs: none of `__consumer_offsets` is served (its coordinator would own some
    groups and not others), the logs made are deleted, and the next use makes the whole topic."""
    data = few_inodes_disk / "data"
    # No checkpoint written meanwhile: the inodes left are counted for the logs.
    quiet = {"log.flush.offset.checkpoint.interval.ms": "3600000"}
    broker = BrokerProcess(data, {"offsets.topic.num.partitions": "5", **quiet})
    broker.start()
    try:
        create_topic(broker.bootstrap, "t")
        free_before = os.statvfs(few_inodes_disk).f_ffree
        create_topic(broker.bootstrap, "probe")
        per_partition = free_before - os.statvfs(few_inodes_disk).f_ffree
        fillers = few_inodes_disk / "fillers"
        fillers.mkdir()
        with pytest.raises(OSError, match="No space left"):
            for i in range(1000):
                (fillers / str(i)).touch()
        # Room for the registry's temporary file and two partitions' logs, and a bit more.
        for i in range(2 * per_partition + 2):
            (fillers / str(i)).unlink()
        since = len(broker.log)
        assert _coordinator(broker.bootstrap, "g", GROUP_KEY) == ErrorCode.COORDINATOR_NOT_AVAILABLE
        line = broker.wait_for_log("cannot create __consumer_offsets on its first use", since=since)
        assert line is not None and f"cannot create the log of {OFFSETS_TOPIC}-" in line
        assert metadata_of(broker.bootstrap, OFFSETS_TOPIC)[1] == 0
        # The next lookup tries again (and fails the same way): wait for that try to end before
        # counting what is left, or its logs are seen half made.
        since = len(broker.log)
        assert _coordinator(broker.bootstrap, "g", GROUP_KEY) == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert broker.wait_for_log("cannot create __consumer_offsets on its first use", since=since)
        served = [p for p in os.listdir(data) if p.startswith(OFFSETS_TOPIC) and "-delete" not in p]
        assert not served  # the logs made were deleted
        for filler in fillers.iterdir():
            filler.unlink()
        _produce(broker.bootstrap, "t", 5)
        assert _consume_and_commit(broker.bootstrap, "g", "t") == 1
        assert metadata_of(broker.bootstrap, OFFSETS_TOPIC)[1] == 5
        broker.restart()
        assert _committed(broker.bootstrap, "g", "t") == 1
        assert not list(data.glob("*-stray"))
    finally:
        broker.stop()
    assert not broker.tracebacks(), "\n".join(broker.log)
