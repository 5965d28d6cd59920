"""The cluster paths' disk work runs in worker threads, never on the event loop (in-process).

Three brokers and a real ZooKeeper, all on this test's trio loop. Broker 1 leads `t-0` and
takes acks=1 records its followers never fetch (their fetchers are parked), then stops; a
follower becomes the leader, and broker 1, started again on the same data, becomes a follower
whose log runs past the leader's epoch: it truncates (OffsetForLeaderEpoch). The cut of its
segment file is held in the worker thread (wrappers of ``os.truncate``/``os.ftruncate``):
meanwhile broker 1 answers Metadata and serves another partition, its fetcher fetches
nothing for `t-0` and its log already reads as cut. Released, the truncation either completes
(broker 1 catches up with the leader) or fails with EIO (its log directory goes offline, the
broker stays up); either way every acknowledged record is read back by a real client from the
leader, and no acks=1 record the leader never had. LeaderAndIsr's `partition.metadata` reads
(the topic ids) are made in worker threads too. On the old code the cut and the reads were
made on the loop's thread.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path
from typing import Any

import pytest
import trio
from confluent_kafka import Consumer, TopicPartition

from protocol.errors import ErrorCode
from protocol.messages.create_topics import CreateTopicsRequest
from protocol.messages.metadata import MetadataRequest
from protocol.record_batch import SimpleRecord
from tests.cluster.harness import call, eventually, start_broker
from tests.wirebroker.helpers import decode_records, fetch_request, produce_request
from wirebroker.replication import fetcher as fetcher_module
from wirebroker.replication import partition_metadata
from wirebroker.server import RunningBroker

pytestmark = pytest.mark.integration

TOPIC, SOLO = "t", "solo"
TP = fetcher_module.TopicPartition(TOPIC, 0)
HOLD = 30.0  # how long a held cut waits for its release (the old code: the loop with it)


class _HeldCut:
    """Wraps ``os.truncate`` and ``os.ftruncate``: a cut of a `.log` file under `directory`
    records its thread and waits for `release`, then fails with `error` if given."""

    def __init__(self, directory: Path, error: OSError | None) -> None:
        self.directory = f"{directory}/"
        self.error = error
        self.truncate, self.ftruncate = os.truncate, os.ftruncate
        self.threads: list[int] = []
        self.started = threading.Event()
        self.release = threading.Event()

    def _hold(self, path: str) -> None:
        if path.startswith(self.directory) and path.endswith(".log"):
            self.threads.append(threading.get_ident())
            self.started.set()
            self.release.wait(HOLD)
            if self.error is not None:
                raise self.error

    def os_truncate(self, path: Any, length: int) -> None:
        self._hold(os.fspath(path))
        self.truncate(path, length)

    def os_ftruncate(self, fd: int, length: int) -> None:
        self._hold(os.readlink(f"/proc/self/fd/{fd}"))
        self.ftruncate(fd, length)


class _Threads:
    """Wraps a function: the threads that called it."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.threads: set[int] = set()

    def __call__(self, *args: Any) -> Any:
        self.threads.add(threading.get_ident())
        return self.fn(*args)


async def _leader(running: RunningBroker, topic: str) -> int:
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)])
    meta = await call(running, request, 12)
    return int(meta.topics[0].partitions[0].leader_id)


async def _produce(running: RunningBroker, topic: str, value: bytes, acks: int) -> int:
    request = produce_request(topic, 0, [SimpleRecord(b"k", value)], acks=acks)
    response = await call(running, request, 9)
    return int(response.responses[0].partition_responses[0].error_code)


async def _produce_until_acked(running: RunningBroker, topic: str, value: bytes) -> None:
    with trio.fail_after(20):
        while await _produce(running, topic, value, -1) != ErrorCode.NONE:
            await trio.sleep(0.05)  # until the replicas are in the ISR


def _consume_all(bootstrap: str, topic: str, end: int) -> list[bytes]:
    """Every value of `topic`-0 up to offset `end`, read by confluent-kafka."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes] = []
        while len(values) < end:
            message = consumer.poll(HOLD)
            assert message is not None, f"only {len(values)} of {end} records read"
            assert message.error() is None, message.error()
            value = message.value()
            assert value is not None
            values.append(value)
        return values
    finally:
        consumer.close()


async def _offline_replicas(running: RunningBroker) -> list[int]:
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)])
    meta = await call(running, request, 12)
    return list(meta.topics[0].partitions[0].offline_replicas)


async def eventually_async(ask: Any, expected: Any, what: str) -> None:
    """Until `await ask()` returns `expected` (within 30 s)."""
    with trio.fail_after(30):
        while await ask() != expected:
            await trio.sleep(0.05)


def _leads(running: RunningBroker) -> bool:
    p = running.broker.partitions.get(TP)
    return p is not None and p.is_local_leader


def _bootstrap(running: RunningBroker) -> str:
    listener = running.listeners[0]
    return f"{listener.host}:{listener.port}"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("outcome", ["done", "EIO"])
def test_a_followers_truncation_runs_in_a_worker_thread(
    zk_connect: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outcome: str
) -> None:
    held = _HeldCut(
        tmp_path / "b1-a" / f"{TOPIC}-0",
        OSError(errno.EIO, "Input/output error") if outcome == "EIO" else None,
    )
    reads = _Threads(partition_metadata.read_topic_id)
    monkeypatch.setattr(partition_metadata, "read_topic_id", reads)
    # Followers whose node id is in `parked` fetch nothing until `resume` is set.
    parked: dict[int, trio.Event] = {}
    resume = trio.Event()
    real_fetch = fetcher_module.ReplicaFetcher._fetch

    async def fetch(self: fetcher_module.ReplicaFetcher, wanted: Any) -> None:
        node = self.manager.broker.node_id
        if node in parked:
            parked[node].set()
            await resume.wait()
            return
        await real_fetch(self, wanted)

    monkeypatch.setattr(fetcher_module.ReplicaFetcher, "_fetch", fetch)

    async def main() -> int:
        loop_thread = threading.get_ident()
        # No follower leaves the ISR while parked; broker 1 has two log directories, `t-0`
        # in the first and `solo-0` in the second.
        lag = {"replica_lag_time_max_ms": "60000"}
        b1_dirs = f"{tmp_path / 'b1-a'},{tmp_path / 'b1-b'}"
        async with trio.open_nursery() as nursery:
            b1 = await start_broker(nursery, zk_connect, tmp_path, 1, log_dirs=b1_dirs, **lag)
            b2 = await start_broker(nursery, zk_connect, tmp_path, 2, **lag)
            b3 = await start_broker(nursery, zk_connect, tmp_path, 3, **lag)
            brokers = {2: b2, 3: b3}
            for name, replicas in ((TOPIC, [1, 2, 3]), (SOLO, [1])):
                topic = CreateTopicsRequest.CreatableTopic(
                    name=name,
                    num_partitions=-1,
                    replication_factor=-1,
                    assignments=[
                        CreateTopicsRequest.CreatableReplicaAssignment(
                            partition_index=0, broker_ids=replicas
                        )
                    ],
                )
                made = await call(b1, CreateTopicsRequest(topics=[topic], timeout_ms=10_000), 7)
                assert made.topics[0].error_code == ErrorCode.NONE
            manager = b1.broker.log_manager
            await eventually(
                lambda: manager.log_dir_of(TOPIC, 0) and manager.log_dir_of(SOLO, 0),
                what="broker 1's logs",
            )
            assert manager.log_dir_of(TOPIC, 0) == tmp_path / "b1-a"
            assert manager.log_dir_of(SOLO, 0) == tmp_path / "b1-b"
            acked = [b"acked-%d" % i for i in range(5)]
            for value in acked:
                await _produce_until_acked(b1, TOPIC, value)

            # The followers stop fetching; broker 1 alone takes acks=1 records, then stops.
            parked.update({2: trio.Event(), 3: trio.Event()})
            with trio.fail_after(20):
                for event in parked.values():
                    await event.wait()
            for i in range(5):
                assert await _produce(b1, TOPIC, b"unreplicated-%d" % i, 1) == ErrorCode.NONE
            assert b1.broker.partitions[TP].log_end_offset == 10
            assert b1.scope is not None
            b1.scope.cancel()
            await eventually(
                lambda: b2.broker.metadata_cache.is_alive(1) is False, 30, "broker 1 gone"
            )
            parked.clear()
            resume.set()
            new_leader = await eventually(
                lambda: next(
                    (b for b in brokers.values() if _leads(b)),
                    None,
                ),
                30,
                "a new leader of t-0",
            )
            later = [b"later-%d" % i for i in range(3)]
            for value in later:
                await _produce_until_acked(new_leader, TOPIC, value)

            # Broker 1 again, on the same data: a follower whose log must be cut at 5.
            monkeypatch.setattr(os, "truncate", held.os_truncate)
            monkeypatch.setattr(os, "ftruncate", held.os_ftruncate)
            b1 = await start_broker(nursery, zk_connect, tmp_path, 1, log_dirs=b1_dirs, **lag)
            try:
                assert await trio.to_thread.run_sync(held.started.wait, HOLD)
                # The cut is held in its worker thread: broker 1 answers and serves solo-0.
                with trio.fail_after(20):
                    meta = await call(b1, MetadataRequest(topics=None), 12)
                    assert {b.node_id for b in meta.brokers} == {1, 2, 3}
                    while await _leader(b1, SOLO) != 1:
                        await trio.sleep(0.05)
                    assert await _produce(b1, SOLO, b"meanwhile", 1) == ErrorCode.NONE
                    fetched = await call(b1, fetch_request(SOLO, 0, 0), 12)
                    records = decode_records(fetched.responses[0].partitions[0].records)
                    assert [v for _, _, v in records] == [b"meanwhile"]
                replica = b1.broker.replica_manager
                assert replica.fetcher_state(TP) == "truncating"
                assert b1.broker.partitions[TP].log_end_offset == 5  # reads as cut already
            finally:
                held.release.set()

            if outcome == "done":
                await eventually(
                    lambda: (
                        b1.broker.partitions[TP].log_end_offset == 8
                        and replica.fetcher_state(TP) == "fetching"
                    ),
                    30,
                    "broker 1 caught up",
                )
            else:
                await eventually(
                    lambda: b1.broker.log_manager.offline_dirs == {tmp_path / "b1-a"},
                    30,
                    "t-0's log directory offline",
                )
                assert replica.fetcher_state(TP) in ("failed", None)  # None: stopped since
                # The controller learns of it: broker 1's replica of t-0 is offline.
                await eventually_async(lambda: _offline_replicas(b2), [1], "t-0's offline replica")
                meta = await call(b1, MetadataRequest(topics=None), 12)  # still up
                assert {b.node_id for b in meta.brokers} == {1, 2, 3}
            values = await trio.to_thread.run_sync(_consume_all, _bootstrap(new_leader), TOPIC, 8)
            assert values == acked + later
            nursery.cancel_scope.cancel()
        return loop_thread

    loop_thread = trio.run(main)
    assert held.threads and loop_thread not in held.threads
    assert reads.threads and loop_thread not in reads.threads
