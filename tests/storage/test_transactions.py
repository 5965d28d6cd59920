"""Transactions in the partition log: producer state transitions and Kafka's checks, the last
stable offset, snapshots carrying an ongoing transaction."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.record_batch import SimpleRecord
from protocol.records import build_end_txn_marker_batch, build_record_batch
from storage.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    TransactionCoordinatorFencedError,
)
from storage.partition_log import PartitionLog
from storage.producer_state import (
    PRODUCER_ID_EXPIRATION_MS,
    CompletedTxn,
    producer_batches,
    read_snapshot,
)
from storage.validation import AppendOrigin

from .helpers import T0, Clock, open_log


def txn_batch(
    pid: int, seq: int, n: int = 1, *, epoch: int = 0, transactional: bool = True, tag: bytes = b"v"
) -> bytearray:
    records = [SimpleRecord(b"k", tag + b"%d" % (seq + i), (), T0 + i) for i in range(n)]
    return bytearray(
        build_record_batch(
            records,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            is_transactional=transactional,
        )
    )


def marker(pid: int, commit: bool, *, epoch: int = 0, coordinator_epoch: int = 0) -> bytearray:
    return bytearray(
        build_end_txn_marker_batch(
            commit,
            producer_id=pid,
            producer_epoch=epoch,
            coordinator_epoch=coordinator_epoch,
            timestamp=T0,
        )
    )


def produce(log: PartitionLog, data: bytearray) -> int:
    """Append as a client; the first offset."""
    info = log.append_as_leader(data, 0, T0)
    log.update_high_watermark(log.log_end_offset)
    return info.first_offset


def end_txn(log: PartitionLog, pid: int, commit: bool, **kw: int) -> int:
    info = log.append_as_leader(marker(pid, commit, **kw), 0, T0, origin=AppendOrigin.COORDINATOR)
    log.update_high_watermark(log.log_end_offset)
    return info.first_offset


# ---- producer state transitions ---------------------------------------------------------


def test_a_transaction_starts_and_ends(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    state = log.producer_state
    assert not state.has_ongoing_transaction(1)
    first = produce(log, txn_batch(1, 0, 3))
    produce(log, txn_batch(1, 3, 2))
    assert state.has_ongoing_transaction(1)
    assert state.producers[1].current_txn_first_offset == first == 0
    assert log.last_stable_offset == 0 and log.high_watermark == 5
    end = end_txn(log, 1, True, coordinator_epoch=4)
    assert end == 5
    assert not state.has_ongoing_transaction(1)
    assert state.producers[1].coordinator_epoch == 4
    assert log.last_stable_offset == log.high_watermark == 6
    # a new transaction starts at its first batch
    produce(log, txn_batch(1, 5))
    assert state.producers[1].current_txn_first_offset == 6
    assert log.last_stable_offset == 6


def test_lso_is_the_oldest_ongoing_transaction(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    produce(log, txn_batch(1, 0))  # 0
    produce(log, build_record_batch([SimpleRecord(None, b"plain", (), T0)]))  # 1
    produce(log, txn_batch(2, 0))  # 2
    assert log.last_stable_offset == 0
    end_txn(log, 1, False)  # 3
    assert log.last_stable_offset == 2
    end_txn(log, 2, True)  # 4
    assert log.last_stable_offset == 5


def test_lso_waits_for_the_marker_to_be_replicated(tmp_path: Path) -> None:
    """Kafka's unreplicated transactions: completed, but its marker is above the high
    watermark, so it is still unstable."""
    log = open_log(tmp_path / "t-0")
    produce(log, txn_batch(1, 0, 2))
    log.append_as_leader(marker(1, False), 0, T0, origin=AppendOrigin.COORDINATOR)
    assert log.log_end_offset == 3 and log.high_watermark == 2
    assert log.last_stable_offset == 0  # not 2: the abort is not replicated yet
    log.update_high_watermark(3)
    assert log.last_stable_offset == 3


def test_lso_never_passes_the_high_watermark(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(txn_batch(1, 0), 0, T0)
    assert log.high_watermark == 0 and log.last_stable_offset == 0
    log.append_as_leader(build_record_batch([SimpleRecord(None, b"x", (), T0)]), 0, T0)
    log.update_high_watermark(1)
    assert log.last_stable_offset == 0


def test_non_transactional_write_during_a_transaction_is_invalid_txn_state(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path / "t-0")
    produce(log, txn_batch(1, 0))
    end = log.log_end_offset
    with pytest.raises(InvalidTxnStateError):
        log.append_as_leader(txn_batch(1, 1, transactional=False), 0, T0)
    assert log.log_end_offset == end  # nothing written
    end_txn(log, 1, True)
    produce(log, txn_batch(1, 1, transactional=False))  # fine once it ended


def test_marker_epoch_and_coordinator_epoch_checks(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    produce(log, txn_batch(1, 0, epoch=3))
    end = log.log_end_offset
    with pytest.raises(InvalidProducerEpochError):
        end_txn(log, 1, True, epoch=2)
    end_txn(log, 1, True, epoch=3, coordinator_epoch=7)
    produce(log, txn_batch(1, 1, epoch=3))
    end = log.log_end_offset
    with pytest.raises(TransactionCoordinatorFencedError):
        end_txn(log, 1, False, epoch=3, coordinator_epoch=6)
    assert log.log_end_offset == end
    assert log.producer_state.has_ongoing_transaction(1)
    # a newer epoch (the coordinator bumped it to abort) is accepted and fences the old one
    end_txn(log, 1, False, epoch=4, coordinator_epoch=7)
    assert not log.producer_state.has_ongoing_transaction(1)
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(txn_batch(1, 2, epoch=3), 0, T0)


def test_marker_without_a_transaction_completes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    end_txn(log, 9, True, coordinator_epoch=2)
    assert log.producer_state.producers[9].coordinator_epoch == 2
    assert log.last_stable_offset == log.high_watermark == 1


def test_completed_transaction_carries_kafkas_last_stable_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    state = log.producer_state
    produce(log, txn_batch(1, 0))  # 0
    produce(log, txn_batch(2, 0))  # 1
    produce(log, txn_batch(1, 1))  # 2
    [update] = producer_batches(memoryview(marker(1, False)))
    update = update._replace(batch=update.batch._replace(first_offset=3, last_offset=3))
    assert state.update(update) == CompletedTxn(1, 0, 3, True, 1)  # producer 2's txn is open
    [update] = producer_batches(memoryview(marker(2, True)))
    update = update._replace(batch=update.batch._replace(first_offset=4, last_offset=4))
    assert state.update(update) == CompletedTxn(2, 1, 4, False, 5)


# ---- snapshots, expiry, reopening -------------------------------------------------------


def test_snapshot_round_trip_with_an_ongoing_transaction(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d)
    produce(log, txn_batch(1, 0))
    end_txn(log, 1, True, coordinator_epoch=3)
    produce(log, txn_batch(1, 1, 2))  # 2-3, ongoing
    produce(log, txn_batch(2, 0))  # 4, ongoing
    log.close()
    entries = {e.producer_id: e for e in read_snapshot(d / f"{5:020d}.snapshot")}
    assert entries[1].current_txn_first_offset == 2 and entries[1].coordinator_epoch == 3
    assert entries[2].current_txn_first_offset == 4
    log = open_log(d, had_clean_shutdown=True, high_watermark=5)
    assert log.producer_state.ongoing == {2: 1, 4: 2}
    assert log.last_stable_offset == 2
    with pytest.raises(InvalidTxnStateError):
        log.append_as_leader(txn_batch(1, 3, transactional=False), 0, T0)
    end_txn(log, 1, False, coordinator_epoch=3)
    assert log.last_stable_offset == 4


def test_unclean_reopen_rebuilds_ongoing_transactions_from_the_log(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d)
    produce(log, txn_batch(1, 0))
    produce(log, txn_batch(2, 0))
    end_txn(log, 2, True)
    log.abandon()  # a crash: no snapshot at the end
    log = open_log(d, high_watermark=3)
    assert log.producer_state.ongoing == {0: 1}
    assert log.last_stable_offset == 0


def test_a_producer_with_an_ongoing_transaction_never_expires(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "t-0", clock=clock)
    produce(log, txn_batch(1, 0))
    produce(log, txn_batch(2, 0, transactional=False))
    clock.advance(PRODUCER_ID_EXPIRATION_MS + 1)
    log.apply_retention(clock.now)
    assert set(log.producer_state.producers) == {1}
    assert log.last_stable_offset == 0


def test_a_follower_keeps_the_same_transaction_state(tmp_path: Path) -> None:
    """Replicated batches carry the transactions: a follower promoted to leader knows them."""
    leader = open_log(tmp_path / "t-0")
    produce(leader, txn_batch(1, 0, 2))  # 0-1
    produce(leader, txn_batch(2, 0))  # 2
    end_txn(leader, 1, False, coordinator_epoch=2)  # 3
    produce(leader, txn_batch(3, 0))  # 4
    with leader.read(0, 1 << 20) as r:
        data = r.read()
    follower = open_log(tmp_path / "f" / "t-0")
    follower.append_as_follower(data)
    assert follower.producer_state.ongoing == leader.producer_state.ongoing == {2: 2, 4: 3}
    assert follower.producer_state.producers[1].coordinator_epoch == 2
    assert follower.last_stable_offset == 0  # nothing replicated yet: the HW is 0
    follower.update_high_watermark(3)
    assert follower.last_stable_offset == 0  # the abort at 3 is not below the HW yet
    follower.update_high_watermark(5)
    assert follower.last_stable_offset == leader.last_stable_offset == 2
    # as the new leader it enforces them
    with pytest.raises(InvalidTxnStateError):
        follower.append_as_leader(txn_batch(2, 1, transactional=False), 1, T0)
    with pytest.raises(TransactionCoordinatorFencedError):
        follower.append_as_leader(
            marker(1, True, coordinator_epoch=1), 1, T0, origin=AppendOrigin.COORDINATOR
        )
