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

A follower's appends: the write of what broker 1 fetches as a follower is held in its worker
thread (a wrapper of ``os.pwrite``), with the same checks; released, the append completes
(also when a LeaderAndIsr making broker 1 the leader waited for it) or fails with EIO (see
`test_a_followers_appends_run_in_a_worker_thread`).
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
from wirebroker.peer import PeerError
from wirebroker.replication import fetcher as fetcher_module
from wirebroker.replication import partition_metadata
from wirebroker.replication.manager import ReplicaManager
from wirebroker.server import RunningBroker

pytestmark = pytest.mark.integration

TOPIC, SOLO = "t", "solo"
TP = fetcher_module.TopicPartition(TOPIC, 0)
HOLD = 30.0  # how long a held cut waits for its release (the old code: the loop with it)


class _Held:
    """Wraps ``os.truncate``, ``os.ftruncate`` and ``os.pwrite`` (each test patches those it
    holds): a cut of, or a write to, a `.log` file under `directory` records its thread and
    waits for `release`, then fails with `error` if given."""

    def __init__(self, directory: Path, error: OSError | None) -> None:
        self.directory = f"{directory}/"
        self.error = error
        self.truncate, self.ftruncate, self.pwrite = os.truncate, os.ftruncate, os.pwrite
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

    def os_pwrite(self, fd: int, data: Any, position: int) -> int:
        self._hold(os.readlink(f"/proc/self/fd/{fd}"))
        return self.pwrite(fd, data, position)


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
    async def acked() -> bool:
        return await _produce(running, topic, value, -1) == ErrorCode.NONE

    await eventually(acked, 20, 0.05, what=f"{topic} to take acks=all (its replicas in the ISR)")


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


async def eventually_equal(ask: Any, expected: Any, what: str, timeout: float = 30) -> None:
    """Until `await ask()` returns `expected`."""

    async def equal() -> bool:
        return bool(await ask() == expected)

    await eventually(equal, timeout, 0.05, what)


def _leads(running: RunningBroker) -> bool:
    p = running.broker.partitions.get(TP)
    return p is not None and p.is_local_leader


def _bootstrap(running: RunningBroker) -> str:
    listener = running.listeners[0]
    return f"{listener.host}:{listener.port}"


#: No follower leaves the ISR while its fetches are parked or its disk work held.
LAG = {"replica_lag_time_max_ms": "60000"}


async def _start_broker_1(nursery: trio.Nursery, zk_connect: str, tmp_path: Path) -> RunningBroker:
    """Broker 1, with two log directories (`b1-a` holds `t-0`, `b1-b` holds `solo-0`)."""
    dirs = f"{tmp_path / 'b1-a'},{tmp_path / 'b1-b'}"
    return await start_broker(nursery, zk_connect, tmp_path, 1, log_dirs=dirs, **LAG)


async def _start_brokers(
    nursery: trio.Nursery, zk_connect: str, tmp_path: Path
) -> tuple[RunningBroker, RunningBroker, RunningBroker]:
    b1 = await _start_broker_1(nursery, zk_connect, tmp_path)
    b2 = await start_broker(nursery, zk_connect, tmp_path, 2, **LAG)
    b3 = await start_broker(nursery, zk_connect, tmp_path, 3, **LAG)
    return b1, b2, b3


async def _create_topics(b1: RunningBroker, replicas: list[int], tmp_path: Path) -> None:
    """`t` with `replicas` and `solo` on broker 1 alone, through broker 1, whose two log
    directories hold `t-0` (the first) and `solo-0` (the second)."""
    for name, assigned in ((TOPIC, replicas), (SOLO, [1])):
        topic = CreateTopicsRequest.CreatableTopic(
            name=name,
            num_partitions=-1,
            replication_factor=-1,
            assignments=[
                CreateTopicsRequest.CreatableReplicaAssignment(
                    partition_index=0, broker_ids=assigned
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


async def _serves_while_held(b1: RunningBroker, value: bytes = b"meanwhile") -> None:
    """Broker 1 answers Metadata and serves `solo-0` (which it leads: `value` produced and
    fetched back) while `t-0`'s disk work is held in its worker thread."""
    with trio.fail_after(20):
        meta = await call(b1, MetadataRequest(topics=None), 12)
        assert {b.node_id for b in meta.brokers} == {1, 2, 3}
        await eventually_equal(lambda: _leader(b1, SOLO), 1, "broker 1 leads solo-0", 15)
        assert await _produce(b1, SOLO, value, 1) == ErrorCode.NONE
        fetched = await call(b1, fetch_request(SOLO, 0, 0), 12)
        records = decode_records(fetched.responses[0].partitions[0].records)
        assert [v for _, _, v in records][-1:] == [value]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("outcome", ["done", "EIO"])
def test_a_followers_truncation_runs_in_a_worker_thread(
    zk_connect: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outcome: str
) -> None:
    held = _Held(
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
        async with trio.open_nursery() as nursery:
            b1, b2, b3 = await _start_brokers(nursery, zk_connect, tmp_path)
            brokers = {2: b2, 3: b3}
            await _create_topics(b1, [1, 2, 3], tmp_path)
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
                lambda: b2.broker.metadata_cache.is_alive(1) is False, 30, what="broker 1 gone"
            )
            parked.clear()
            resume.set()
            new_leader = await eventually(
                lambda: next(
                    (b for b in brokers.values() if _leads(b)),
                    None,
                ),
                30,
                what="a new leader of t-0",
            )
            later = [b"later-%d" % i for i in range(3)]
            for value in later:
                await _produce_until_acked(new_leader, TOPIC, value)

            # Broker 1 again, on the same data: a follower whose log must be cut at 5.
            monkeypatch.setattr(os, "truncate", held.os_truncate)
            monkeypatch.setattr(os, "ftruncate", held.os_ftruncate)
            b1 = await _start_broker_1(nursery, zk_connect, tmp_path)
            try:
                assert await trio.to_thread.run_sync(held.started.wait, HOLD)
                await _serves_while_held(b1)
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
                    what="broker 1 caught up",
                )
            else:
                await eventually(
                    lambda: b1.broker.log_manager.offline_dirs == {tmp_path / "b1-a"},
                    30,
                    what="t-0's log directory offline",
                )
                assert replica.fetcher_state(TP) in ("failed", None)  # None: stopped since
                # The controller learns of it: broker 1's replica of t-0 is offline.
                await eventually_equal(lambda: _offline_replicas(b2), [1], "t-0's offline replica")
                meta = await call(b1, MetadataRequest(topics=None), 12)  # still up
                assert {b.node_id for b in meta.brokers} == {1, 2, 3}
            values = await trio.to_thread.run_sync(_consume_all, _bootstrap(new_leader), TOPIC, 8)
            assert values == acked + later
            nursery.cancel_scope.cancel()
        return loop_thread

    loop_thread = trio.run(main)
    assert held.threads and loop_thread not in held.threads
    assert reads.threads and loop_thread not in reads.threads


@pytest.mark.timeout(240)
@pytest.mark.parametrize("outcome", ["done", "leader", "EIO"])
def test_a_followers_appends_run_in_a_worker_thread(
    zk_connect: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outcome: str
) -> None:
    """Broker 1 follows `t-0` (replicas [2, 1]); the write of the records it fetches is held in
    its worker thread (a wrapper of ``os.pwrite``): meanwhile it answers Metadata and serves
    `solo-0`, its log reads as before the append, and the acks=all record it holds is not
    acknowledged. Released, the append completes ("done": the record is acknowledged, and read
    back from broker 1 once it leads), or broker 2 was stopped meanwhile ("leader": the
    LeaderAndIsr making broker 1 the leader waits for the append, then it leads a log holding
    it), or it fails with EIO ("EIO": the log directory goes offline, the broker stays up, the
    controller learns). On the old code the write was made on the loop's thread."""
    held = _Held(
        tmp_path / "b1-a" / f"{TOPIC}-0",
        OSError(errno.EIO, "Input/output error") if outcome == "EIO" else None,
    )
    lead_orders = threading.Event()  # a LeaderAndIsr making broker 1 leader of t-0 arrived
    apply_orders = ReplicaManager.become_leader_or_follower

    async def become_leader_or_follower(self: ReplicaManager, request: Any, version: int) -> Any:
        if self.broker.node_id == 1 and any(
            t.topic_name == TOPIC and any(s.leader == 1 for s in t.partition_states)
            for t in request.topic_states
        ):
            lead_orders.set()
        return await apply_orders(self, request, version)

    monkeypatch.setattr(ReplicaManager, "become_leader_or_follower", become_leader_or_follower)

    async def main() -> int:
        loop_thread = threading.get_ident()
        async with trio.open_nursery() as nursery:
            b1, b2, _b3 = await _start_brokers(nursery, zk_connect, tmp_path)
            await _create_topics(b1, [2, 1], tmp_path)
            manager = b1.broker.log_manager
            await eventually_equal(lambda: _leader(b2, TOPIC), 2, "broker 2 leads t-0")
            acked = [b"acked-%d" % i for i in range(3)]
            for value in acked:
                await _produce_until_acked(b2, TOPIC, value)
            p1 = b1.broker.partitions[TP]
            await eventually(lambda: p1.high_watermark == 3, 30, what="broker 1 has them")

            # Broker 1's next write to t-0 is held in its worker thread.
            monkeypatch.setattr(os, "pwrite", held.os_pwrite)
            answers: list[int | str] = []

            async def produce_held() -> None:
                try:
                    answers.append(await _produce(b2, TOPIC, b"held", -1))
                except PeerError as e:  # broker 2 stopped before it answered ("leader")
                    answers.append(repr(e))

            nursery.start_soon(produce_held)
            try:
                assert await trio.to_thread.run_sync(held.started.wait, HOLD)
                await _serves_while_held(b1)
                assert p1.log.writing and p1.log_end_offset == 3  # reads as before
                assert answers == []  # acks=all waits for broker 1's append
                if outcome == "leader":
                    assert b2.scope is not None
                    b2.scope.cancel()
                    assert await trio.to_thread.run_sync(lead_orders.wait, HOLD)
                    await _serves_while_held(b1, b"while the orders wait")
                    # The LeaderAndIsr waits for the append: broker 1 follows still.
                    assert not _leads(b1) and p1.log.writing and p1.log_end_offset == 3
            finally:
                held.release.set()
                monkeypatch.setattr(os, "pwrite", held.pwrite)  # broker 1 may lead, below

            if outcome == "EIO":
                await eventually(
                    lambda: manager.offline_dirs == {tmp_path / "b1-a"},
                    30,
                    what="t-0's log directory offline",
                )
                replica = b1.broker.replica_manager
                assert replica.fetcher_state(TP) in ("failed", None)  # None: stopped since
                await eventually_equal(lambda: _offline_replicas(b2), [1], "t-0's offline replica")
                meta = await call(b1, MetadataRequest(topics=None), 12)  # still up
                assert {b.node_id for b in meta.brokers} == {1, 2, 3}
                values = await trio.to_thread.run_sync(_consume_all, _bootstrap(b2), TOPIC, 3)
                assert values == acked
            else:
                if outcome == "done":
                    await eventually(lambda: answers, 30, what="the held record's answer")
                    assert answers == [ErrorCode.NONE]  # acknowledged once broker 1 wrote it
                    assert b2.scope is not None
                    b2.scope.cancel()
                await eventually(lambda: _leads(b1), 30, what="broker 1 leads t-0")
                assert p1.log_end_offset == 4 and not p1.log.writing
                assert await _produce(b1, TOPIC, b"after", 1) == ErrorCode.NONE
                assert p1.log_end_offset == 5
                values = await trio.to_thread.run_sync(_consume_all, _bootstrap(b1), TOPIC, 5)
                assert values == [*acked, b"held", b"after"]
            nursery.cancel_scope.cancel()
        return loop_thread

    loop_thread = trio.run(main)
    assert held.threads and loop_thread not in held.threads
