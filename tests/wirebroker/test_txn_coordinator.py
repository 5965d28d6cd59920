"""The transaction coordinator in-process, on trio's MockClock (autojump) with a broker clock
that follows it, so its timers pass at once: a transaction past its timeout is aborted and its
producer fenced, idle transactional ids expire (and stay gone after a restart); and what a
restart reloads from `__transaction_state` and `__consumer_offsets` -- an ongoing transaction,
a prepared commit completed by writing its markers, transactional offsets pending, committed
or aborted."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import pytest
import trio
import trio.testing

from protocol.errors import ErrorCode, KafkaError
from protocol.record_batch import SimpleRecord
from protocol.record_builder import build_record_batch
from tests.wirebroker.helpers import eventually, make_internal_topics, trio_clock
from wirebroker.broker import Broker
from wirebroker.config import BrokerConfig
from wirebroker.group.state import CommittedOffset
from wirebroker.partition import TopicPartition
from wirebroker.server import serve_broker
from wirebroker.topics import OFFSETS_TOPIC, TXN_TOPIC
from wirebroker.txn.state import TxnState
from wirebroker.txn.verification import TransactionalWriter

E = ErrorCode
TP = TopicPartition("t", 0)
# A transaction open across a restart must outlive the mock clock's jumps: the clock autojumps
# to the next timer whenever every task waits, also while a worker thread loads a log or a
# coordinator's topic (on a loaded machine, past any ordinary timeout), and a timed-out open
# transaction would be aborted during the restart. LASTING lets one of NEVER_MS never time out.
NEVER_MS = 2**31 - 1
LASTING = {
    "transaction_max_timeout_ms": str(NEVER_MS),
    "transaction_abort_timed_out_transaction_cleanup_interval_ms": str(NEVER_MS),
}


def config(data_dir: Path, **extra: str) -> BrokerConfig:
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:0",
        "log.dirs": str(data_dir),
        "transaction.state.log.num.partitions": "3",
        "offsets.topic.num.partitions": "3",
    }
    props.update({k.replace("_", "."): v for k, v in extra.items()})
    return BrokerConfig.from_properties(props)


@asynccontextmanager
async def running(data_dir: Path, **extra: str) -> AsyncIterator[Broker]:
    async with trio.open_nursery() as nursery:
        server = await nursery.start(
            partial(serve_broker, config(data_dir, **extra), clock=trio_clock())
        )
        broker = server.broker
        await make_internal_topics(broker, TXN_TOPIC, OFFSETS_TOPIC)
        yield broker
        nursery.cancel_scope.cancel()


def run(test: Callable[[], Awaitable[None]]) -> None:
    """Run `test` on the mock clock. No deadline around it: while a worker thread finishes at
    shutdown the clock would jump to it (pytest-timeout guards the test)."""
    trio.run(test, clock=trio.testing.MockClock(autojump_threshold=0))


async def until(predicate: Callable[[], bool], what: str) -> None:
    """Until `predicate` holds, in virtual time: the clock jumps each poll while everything
    waits, also while a worker thread loads a log, so the deadline is a generous 60 s."""
    await eventually(predicate, 60, 0.01, what)


def state_of(broker: Broker, tid: str) -> TxnState | None:
    metadata = broker.transactions.state.lookup(tid).metadata
    return None if metadata is None else metadata.state


async def begin(broker: Broker, tid: str, timeout_ms: int = 60_000) -> tuple[int, int]:
    """InitProducerId and a transaction on t-0 holding one batch: (producer id, epoch)."""
    if broker.topics.get("t") is None:
        broker.create_topic("t", 1, 1, {})
    result = await broker.transactions.init_producer_id(tid, timeout_ms, None)
    assert result.error == E.NONE
    pid, epoch = result.producer_id, result.producer_epoch
    assert await broker.transactions.add_partitions(tid, pid, epoch, frozenset({TP})) == E.NONE
    partition = broker.partition("t", 0)
    assert partition is not None
    partition.append_to_leader(txn_batch(broker, pid, epoch), broker.now_ms())
    return pid, epoch


def txn_batch(broker: Broker, pid: int, epoch: int) -> memoryview:
    """The producer's first transactional batch (one record, sequence 0)."""
    batch = build_record_batch(
        [SimpleRecord(b"k", b"v", (), broker.now_ms())],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=0,
        is_transactional=True,
    )
    return memoryview(bytearray(batch))


def ongoing(broker: Broker, pid: int) -> bool:
    partition = broker.partition("t", 0)
    assert partition is not None
    return partition.log.producer_state.has_ongoing_transaction(pid)


def test_a_timed_out_transaction_is_aborted_and_its_producer_fenced(tmp_path: Path) -> None:
    async def test() -> None:
        async with running(
            tmp_path, transaction_abort_timed_out_transaction_cleanup_interval_ms="1000"
        ) as broker:
            coordinator = broker.transactions
            pid, epoch = await begin(broker, "slow", timeout_ms=5_000)
            started = trio.current_time()
            await until(
                lambda: state_of(broker, "slow") == TxnState.COMPLETE_ABORT,
                "transaction slow aborted",
            )
            assert 5 <= trio.current_time() - started <= 6 + 1  # the timeout, then the check
            assert not ongoing(broker, pid)  # the abort marker was written
            metadata = coordinator.state.lookup("slow").metadata
            assert metadata is not None and metadata.producer_epoch == epoch + 1
            assert await coordinator.end_transaction("slow", pid, epoch, True) == (
                E.PRODUCER_FENCED
            )
            again = await coordinator.init_producer_id("slow", 5_000, None)
            assert (again.error, again.producer_id, again.producer_epoch) == (
                E.NONE,
                pid,
                epoch + 2,
            )

    run(test)


def test_idle_transactional_ids_expire(tmp_path: Path) -> None:
    hour_ms = 3_600_000

    async def test() -> None:
        async with running(
            tmp_path,
            transactional_id_expiration_ms=str(hour_ms),
            transaction_remove_expired_transaction_cleanup_interval_ms=str(hour_ms // 4),
            transaction_max_timeout_ms=str(3 * hour_ms),
        ) as broker:
            coordinator = broker.transactions
            assert (await coordinator.init_producer_id("idle", 60_000, None)).error == E.NONE
            await begin(broker, "busy", timeout_ms=2 * hour_ms)  # an ongoing one never expires
            await trio.sleep(hour_ms / 1000 * 1.5)  # the idle id outlives its expiry: the scenario
            assert coordinator.describe("idle").error_code == E.TRANSACTIONAL_ID_NOT_FOUND
            assert state_of(broker, "busy") == TxnState.ONGOING
        async with running(tmp_path) as broker:  # the tombstone stays
            assert broker.transactions.describe("idle").error_code == E.TRANSACTIONAL_ID_NOT_FOUND

    run(test)


def test_an_ongoing_transaction_survives_a_restart(tmp_path: Path) -> None:
    async def test() -> None:
        async with running(tmp_path, **LASTING) as broker:
            pid, epoch = await begin(broker, "tx", NEVER_MS)
        async with running(tmp_path, **LASTING) as broker:
            described = broker.transactions.describe("tx")
            assert (described.transaction_state, described.producer_id) == ("Ongoing", pid)
            assert [(t.topic, t.partitions) for t in described.topics] == [("t", [0])]
            assert ongoing(broker, pid)
            assert await broker.transactions.end_transaction("tx", pid, epoch, False) == E.NONE
            await until(
                lambda: state_of(broker, "tx") == TxnState.COMPLETE_ABORT, "transaction tx aborted"
            )
            assert not ongoing(broker, pid)

    run(test)


def test_a_prepared_commit_is_completed_after_a_restart(tmp_path: Path) -> None:
    """The coordinator stopped between the PrepareCommit record and the markers: the next one
    writes the markers after loading, then CompleteCommit."""

    async def test() -> None:
        async with running(tmp_path) as broker:
            pid, _ = await begin(broker, "tx")
            state = broker.transactions.state
            found = state.lookup("tx")
            assert found.metadata is not None
            transit = found.metadata.prepare_abort_or_commit(
                TxnState.PREPARE_COMMIT, broker.now_ms()
            )
            assert await state.append("tx", found.coordinator_epoch, transit) == E.NONE
            assert state_of(broker, "tx") == TxnState.PREPARE_COMMIT  # and no marker sent
        async with running(tmp_path) as broker:
            await until(
                lambda: state_of(broker, "tx") == TxnState.COMPLETE_COMMIT,
                "transaction tx committed",
            )
            assert not ongoing(broker, pid)
            partition = broker.partition("t", 0)
            assert partition is not None
            assert partition.log.log_end_offset == 2  # the batch and its COMMIT marker

    run(test)


def test_transactional_offsets_across_a_restart(tmp_path: Path) -> None:
    """Replaying `__consumer_offsets`: a committed transaction's offsets are the group's, an
    aborted one's are dropped, an open one's stay pending until its transaction ends."""

    async def commit_offset(
        broker: Broker, tid: str, group: str, offset: int, timeout_ms: int = 60_000
    ) -> tuple[int, int]:
        coordinator = broker.transactions
        result = await coordinator.init_producer_id(tid, timeout_ms, None)
        pid, epoch = result.producer_id, result.producer_epoch
        offsets_tp = TopicPartition(OFFSETS_TOPIC, broker.groups.group_manager.partition_of(group))
        assert await coordinator.add_partitions(tid, pid, epoch, frozenset({offsets_tp})) == E.NONE
        writer = TransactionalWriter(broker, tid, pid, epoch, abortable_ok=True)
        codes = await broker.groups.group_manager.commit_transactional(
            group,
            writer,
            "",
            None,
            -1,
            [("t", 0, CommittedOffset(offset, -1, "", broker.now_ms()))],
        )
        assert codes == [E.NONE]
        return pid, epoch

    def offset_of(broker: Broker, group: str) -> int | None:
        committed = broker.groups.group_manager.fetch(group).get(("t", 0))
        return None if committed is None else committed.offset

    async def test() -> None:
        async with running(tmp_path, **LASTING) as broker:
            broker.create_topic("t", 1, 1, {})
            coordinator = broker.transactions
            pid, epoch = await commit_offset(broker, "c", "committed", 5)
            assert offset_of(broker, "committed") is None
            assert await coordinator.end_transaction("c", pid, epoch, True) == E.NONE
            await until(
                lambda: offset_of(broker, "committed") == 5, "group committed's offset at 5"
            )
            pid, epoch = await commit_offset(broker, "a", "aborted", 6)
            assert await coordinator.end_transaction("a", pid, epoch, False) == E.NONE
            await until(
                lambda: state_of(broker, "a") == TxnState.COMPLETE_ABORT, "transaction a aborted"
            )
            open_pid, open_epoch = await commit_offset(broker, "o", "open", 7, NEVER_MS)
            assert broker.groups.group_manager.unstable("open", ("t", 0))
        async with running(tmp_path, **LASTING) as broker:
            assert offset_of(broker, "committed") == 5
            assert offset_of(broker, "aborted") is None
            assert not broker.groups.group_manager.unstable("aborted", ("t", 0))
            assert offset_of(broker, "open") is None and broker.groups.group_manager.unstable(
                "open", ("t", 0)
            )
            assert broker.groups.describe("open") is not None  # known by its open offsets
            error = await broker.transactions.end_transaction("o", open_pid, open_epoch, True)
            assert error == E.NONE
            await until(lambda: offset_of(broker, "open") == 7, "group open's offset at 7")
            assert not broker.groups.group_manager.unstable("open", ("t", 0))

    run(test)


def test_an_exhausted_epoch_gets_a_new_producer_id(tmp_path: Path) -> None:
    async def test() -> None:
        async with running(tmp_path) as broker:
            coordinator = broker.transactions
            first = await coordinator.init_producer_id("old", 60_000, None)
            metadata = coordinator.state.lookup("old").metadata
            assert metadata is not None
            metadata.producer_epoch = 32766  # Short.MAX_VALUE - 1: no bump left
            rotated = await coordinator.init_producer_id("old", 60_000, (first.producer_id, 32766))
            assert rotated.error == E.NONE and rotated.producer_id != first.producer_id
            assert rotated.producer_epoch == 0
            # the same call retried (its answer lost): the new id again, not a fence
            again = await coordinator.init_producer_id("old", 60_000, (first.producer_id, 32766))
            assert (again.error, again.producer_id) == (E.NONE, rotated.producer_id)
            stale = await coordinator.init_producer_id("old", 60_000, (first.producer_id, 5))
            assert stale.error == E.PRODUCER_FENCED

    run(test)


def test_verify_partitions(tmp_path: Path) -> None:
    """What AddPartitionsToTxn v4+ `verify_only` answers (brokers ask it; on the wire only a
    cluster's inter-broker listener takes it): NONE for a partition in the transaction,
    TRANSACTION_ABORTABLE for one that is not, the id's error for the others."""

    async def test() -> None:
        async with running(tmp_path) as broker:
            pid, epoch = await begin(broker, "v")
            other = TopicPartition("t", 1)
            answers = broker.transactions.verify_partitions("v", pid, epoch, [TP, other])
            assert answers == {TP: E.NONE, other: E.TRANSACTION_ABORTABLE}
            unknown = broker.transactions.verify_partitions("unknown-id", pid, epoch, [TP])
            assert unknown == {TP: E.INVALID_PRODUCER_ID_MAPPING}
            fenced = broker.transactions.verify_partitions("v", pid, epoch + 1, [TP])
            assert fenced == {TP: E.PRODUCER_FENCED}

    run(test)


def test_a_marker_landing_during_verification_voids_it(tmp_path: Path) -> None:
    """Kafka's verification guard, with the broker's own parts: a transactional batch whose
    verification was answered before its transaction ended (the coordinator's ABORT marker
    landed meanwhile, as when a remote coordinator is slow to answer) is refused, and no
    transaction is left open; a batch verified afterwards is refused by the coordinator."""

    async def test() -> None:
        async with running(tmp_path) as broker:
            broker.create_topic("t", 1, 1, {})
            coordinator = broker.transactions
            init = await coordinator.init_producer_id("guarded", 60_000, None)
            pid, epoch = init.producer_id, init.producer_epoch
            assert (
                await coordinator.add_partitions("guarded", pid, epoch, frozenset({TP})) == E.NONE
            )
            writer = TransactionalWriter(broker, "guarded", pid, epoch, abortable_ok=True)
            verified = await writer.verify({TP: 0})
            assert verified.errors == {}  # in the transaction: verified, guard taken
            # the producer aborts (or the transaction times out) before its batch is appended
            assert await coordinator.end_transaction("guarded", pid, epoch, False) == E.NONE
            await until(
                lambda: state_of(broker, "guarded") == TxnState.COMPLETE_ABORT,
                "transaction guarded aborted",
            )
            partition = broker.partition("t", 0)
            assert partition is not None
            end = partition.log_end_offset  # the ABORT marker
            with pytest.raises(KafkaError) as refused:
                partition.append_to_leader(
                    txn_batch(broker, pid, epoch),
                    broker.now_ms(),
                    verification_guard=verified.guard(TP),
                )
            assert refused.value.error_code == E.INVALID_TXN_STATE
            assert partition.log_end_offset == end and not ongoing(broker, pid)
            again = await writer.verify({TP: 0})  # the retry: no longer in a transaction
            assert again.errors == {TP: E.TRANSACTION_ABORTABLE}

    run(test)
