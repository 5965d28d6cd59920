"""The transaction state machine (Kafka's TransactionMetadata), pure: every transition from
every state, legal or not, the two-step prepare/complete with its checks, KIP-360's epoch
rules; and the records of `__transaction_state`, byte for byte in Kafka's layout."""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable

import pytest

from protocol.errors import ErrorCode
from wirebroker.partition import TopicPartition
from wirebroker.txn import records
from wirebroker.txn.state import (
    NO_PRODUCER_EPOCH,
    VALID_PREVIOUS,
    IllegalTransition,
    TransactionMetadata,
    TxnState,
    TxnTransit,
)

S = TxnState
TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)

#: Kafka 3.9's TransactionState.validPreviousStates, written out independently of the module.
KAFKA_PREVIOUS = {
    "Empty": {"Empty", "CompleteCommit", "CompleteAbort"},
    "Ongoing": {"Ongoing", "Empty", "CompleteCommit", "CompleteAbort"},
    "PrepareCommit": {"Ongoing"},
    "PrepareAbort": {"Ongoing", "PrepareEpochFence"},
    "CompleteCommit": {"PrepareCommit"},
    "CompleteAbort": {"PrepareAbort"},
    "Dead": {"Empty", "CompleteAbort", "CompleteCommit"},
    "PrepareEpochFence": {"Ongoing"},
}


def md(
    state: TxnState, epoch: int = 3, partitions: set[TopicPartition] | None = None
) -> TransactionMetadata:
    ongoing = state in (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE)
    return TransactionMetadata(
        "tx",
        producer_id=7,
        producer_epoch=epoch,
        timeout_ms=60_000,
        state=state,
        update_ms=1_000,
        partitions=set(partitions if partitions is not None else ({TP0} if ongoing else set())),
        start_ms=500 if state != S.EMPTY else -1,
    )


#: One way to prepare a transition to each target state.
PREPARE: dict[TxnState, Callable[[TransactionMetadata], object]] = {
    S.EMPTY: lambda m: m.prepare_increment_producer_epoch(60_000, None, 2_000),
    S.ONGOING: lambda m: m.prepare_add_partitions(frozenset({TP1}), 2_000),
    S.PREPARE_COMMIT: lambda m: m.prepare_abort_or_commit(S.PREPARE_COMMIT, 2_000),
    S.PREPARE_ABORT: lambda m: m.prepare_abort_or_commit(S.PREPARE_ABORT, 2_000),
    S.DEAD: lambda m: m.prepare_dead(),
    S.PREPARE_EPOCH_FENCE: lambda m: m.prepare_fence_producer_epoch(),
}


def test_the_transition_table_is_kafkas() -> None:
    assert {
        target.display_name: {s.display_name for s in sources}
        for target, sources in VALID_PREVIOUS.items()
    } == KAFKA_PREVIOUS
    assert [s.id for s in S] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert S.from_id(7) is S.PREPARE_EPOCH_FENCE and S.from_name("Ongoing") is S.ONGOING
    assert S.from_name("ongoing") is None


@pytest.mark.parametrize(
    ("source", "target"), list(itertools.product(list(S), list(PREPARE))), ids=str
)
def test_every_prepare_from_every_state(source: TxnState, target: TxnState) -> None:
    m = md(source)
    if source in VALID_PREVIOUS[target]:
        transit = PREPARE[target](m)
        assert isinstance(transit, TxnTransit) and transit.state is target
        assert m.pending is target and m.state is source  # nothing applied yet
    else:
        with pytest.raises(IllegalTransition):
            PREPARE[target](m)
        assert m.pending is None


@pytest.mark.parametrize("source", list(S), ids=str)
def test_complete_follows_only_a_prepare(source: TxnState) -> None:
    m = md(source)
    if source in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        transit = m.prepare_complete(2_000)
        expected = S.COMPLETE_COMMIT if source == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        assert transit.state is expected and transit.partitions == frozenset()
        m.complete(transit)
        assert (m.state, m.partitions, m.pending, m.update_ms) == (expected, set(), None, 2_000)
    else:
        with pytest.raises(IllegalTransition):
            m.prepare_complete(2_000)


def test_a_pending_transition_blocks_any_other() -> None:
    m = md(S.ONGOING)
    m.prepare_abort_or_commit(S.PREPARE_COMMIT, 2_000)
    for target, prepare in PREPARE.items():
        with pytest.raises(IllegalTransition):
            prepare(m)
        assert m.pending is S.PREPARE_COMMIT, target
    m.abort_pending()
    assert m.pending is None and m.state is S.ONGOING


def test_a_whole_transaction() -> None:
    m = TransactionMetadata("tx", 7, NO_PRODUCER_EPOCH, 60_000, S.EMPTY, 100)
    init = m.prepare_increment_producer_epoch(60_000, None, 100)
    assert isinstance(init, TxnTransit) and init.producer_epoch == 0
    m.complete(init)
    add = m.prepare_add_partitions(frozenset({TP0}), 200)
    assert add.start_ms == 200
    m.complete(add)
    more = m.prepare_add_partitions(frozenset({TP1}), 300)
    assert more.start_ms == 200 and more.partitions == {TP0, TP1}  # the same transaction
    m.complete(more)
    m.complete(m.prepare_abort_or_commit(S.PREPARE_COMMIT, 400))
    assert (m.state, m.partitions) == (S.PREPARE_COMMIT, {TP0, TP1})
    m.remove_partition(TP0)
    m.remove_partition(TP1)
    m.complete(m.prepare_complete(500))
    assert (m.state, m.start_ms, m.update_ms) == (S.COMPLETE_COMMIT, 200, 500)
    again = m.prepare_add_partitions(frozenset({TP1}), 600)
    assert again.start_ms == 600  # a new transaction starts
    m.complete(again)
    assert m.partitions == {TP1}


def test_complete_checks_what_it_applies() -> None:
    m = md(S.ONGOING)
    transit = m.prepare_abort_or_commit(S.PREPARE_ABORT, 2_000)
    with pytest.raises(IllegalTransition):  # not the pending one
        m.complete(md(S.ONGOING).prepare_abort_or_commit(S.PREPARE_COMMIT, 2_000))
    m.partitions.add(TP1)  # partitions changed under the prepared record
    with pytest.raises(IllegalTransition):
        m.complete(transit)
    with pytest.raises(IllegalTransition):  # the fence is never completed, nor Dead
        fenced = md(S.ONGOING)
        fenced.complete(fenced.prepare_fence_producer_epoch())
    with pytest.raises(IllegalTransition):
        dead = md(S.EMPTY)
        dead.complete(dead.prepare_dead())
    with pytest.raises(IllegalTransition):
        md(S.COMPLETE_ABORT).remove_partition(TP0)


def test_kip360_epoch_rules() -> None:
    m = md(S.COMPLETE_COMMIT, epoch=5)
    m.last_producer_epoch = 4
    bump = m.prepare_increment_producer_epoch(60_000, 5, 2_000)  # the current epoch: bump
    assert isinstance(bump, TxnTransit)
    assert (bump.producer_epoch, bump.last_producer_epoch) == (6, 5)
    m.abort_pending()
    retry = m.prepare_increment_producer_epoch(60_000, 4, 2_000)  # the previous: a retry
    assert isinstance(retry, TxnTransit)
    assert (retry.producer_epoch, retry.last_producer_epoch) == (5, 4)
    m.abort_pending()
    assert m.prepare_increment_producer_epoch(60_000, 2, 2_000) == ErrorCode.PRODUCER_FENCED
    assert m.pending is None


def test_epoch_exhaustion_and_rotation() -> None:
    m = md(S.COMPLETE_ABORT, epoch=32766)
    assert m.producer_epoch_exhausted
    with pytest.raises(IllegalTransition):
        m.prepare_increment_producer_epoch(60_000, None, 2_000)
    rotated = m.prepare_producer_id_rotation(8, 30_000, 2_000, record_last_epoch=True)
    m.complete(rotated)
    assert (m.producer_id, m.producer_epoch, m.last_producer_id) == (8, 0, 7)
    assert (m.last_producer_epoch, m.timeout_ms) == (32766, 30_000)
    with pytest.raises(IllegalTransition):
        md(S.ONGOING).prepare_producer_id_rotation(9, 1, 1, record_last_epoch=False)


def test_a_failed_epoch_fence_is_not_bumped_twice() -> None:
    m = md(S.ONGOING, epoch=3)
    fence = m.prepare_fence_producer_epoch()
    assert (fence.state, fence.producer_epoch) == (S.PREPARE_EPOCH_FENCE, 4)
    m.begin_epoch_fence_abort(fence.producer_epoch)
    assert (m.pending, m.producer_epoch) == (None, 4)
    abort = m.prepare_abort_or_commit(S.PREPARE_ABORT, 2_000)
    assert abort.producer_epoch == 4
    m.abort_pending()  # the abort's write failed
    m.failed_epoch_fence = True
    assert m.prepare_fence_producer_epoch().producer_epoch == 4
    with pytest.raises(IllegalTransition):
        md(S.ONGOING).begin_epoch_fence_abort(9)  # no fence pending


# -- records -----------------------------------------------------------------------------------


def kafka_string(s: str) -> bytes:
    data = s.encode()
    return struct.pack(">h", len(data)) + data


def test_key_bytes_are_kafkas() -> None:
    assert records.key("my-txn") == struct.pack(">h", 0) + kafka_string("my-txn")
    assert records.decode_key(records.key("my-txn")) == "my-txn"
    assert records.decode_key(struct.pack(">h", 1) + kafka_string("x")) is None


def test_value_bytes_are_kafkas() -> None:
    m = md(
        S.ONGOING,
        epoch=2,
        partitions={TopicPartition("b", 1), TopicPartition("a", 3), TopicPartition("b", 0)},
    )
    transit = m.prepare_abort_or_commit(S.PREPARE_COMMIT, 1_700_000_000_123)
    expected = (
        struct.pack(">hqhib", 0, 7, 2, 60_000, 2)
        + struct.pack(">i", 2)
        + kafka_string("a")
        + struct.pack(">ii", 1, 3)
        + kafka_string("b")
        + struct.pack(">iii", 2, 0, 1)
        + struct.pack(">qq", 1_700_000_000_123, 500)
    )
    assert records.value(transit) == expected
    back = records.decode_value("tx", expected)
    assert back is not None
    assert (back.producer_id, back.producer_epoch, back.state, back.timeout_ms) == (
        7,
        2,
        S.PREPARE_COMMIT,
        60_000,
    )
    assert back.partitions == transit.partitions
    assert (back.start_ms, back.update_ms) == (500, 1_700_000_000_123)
    assert (back.last_producer_id, back.last_producer_epoch) == (-1, -1)  # never stored


def test_an_empty_transaction_has_a_null_partition_list() -> None:
    m = TransactionMetadata("tx", 7, NO_PRODUCER_EPOCH, 60_000, S.EMPTY, 100)
    transit = m.prepare_increment_producer_epoch(60_000, None, 100)
    assert isinstance(transit, TxnTransit)
    assert records.value(transit) == struct.pack(">hqhibiqq", 0, 7, 0, 60_000, 0, -1, 100, -1)
    assert records.decode_value("tx", None) is None  # a tombstone
    with pytest.raises(ValueError):
        records.decode_value("tx", struct.pack(">h", 9))
