"""Transactions in the partition log: producer state transitions and Kafka's checks, the last
stable offset, snapshots carrying an ongoing transaction, followers, and the aborted
transaction index (its format, recovery, truncation, retention, reads)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.record_batch import RecordBatchView, SimpleRecord
from protocol.records import (
    Batch,
    build_end_txn_marker_batch,
    build_record_batch,
    iter_batches,
    iter_records,
)
from storage.config import LogConfig
from storage.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from storage.partition_log import PartitionLog
from storage.producer_state import (
    PRODUCER_ID_EXPIRATION_MS,
    SENTINEL,
    CompletedTxn,
    VerificationGuard,
    producer_batches,
    read_snapshot,
)
from storage.txn_index import AbortedTxn, TransactionIndex
from storage.validation import AppendOrigin

from .helpers import T0, Clock, batches_of, open_log
from .test_compaction import COMPACT


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


def test_the_verification_guard(tmp_path: Path) -> None:
    """KIP-890 (Kafka's VerificationGuard): the first transactional batch must bring the guard
    taken when its verification started; a marker landing meanwhile voids it."""
    log = open_log(tmp_path / "t-0")
    state = log.producer_state

    def append(data: bytearray, guard: VerificationGuard | None) -> int:
        info = log.append_as_leader(data, 0, T0, verification_guard=guard)
        log.update_high_watermark(log.log_end_offset)
        return info.first_offset

    guard = state.start_verification(1, 0, 0, T0)
    assert state.start_verification(1, 0, 0, T0) is guard  # a retry keeps it
    # a marker of the producer lands while the coordinator is asked: the guard is void
    end_txn(log, 1, False)
    end = log.log_end_offset
    with pytest.raises(InvalidTxnStateError, match="not part of an ongoing transaction"):
        append(txn_batch(1, 0), guard)
    with pytest.raises(InvalidTxnStateError):
        append(txn_batch(1, 0), SENTINEL)  # no guard at all
    assert log.log_end_offset == end  # nothing written
    # a new verification: its guard is taken, then the transaction goes on without one
    fresh = state.start_verification(1, 0, 0, T0)
    assert fresh is not guard
    append(txn_batch(1, 0), fresh)
    assert state.start_verification(1, 1, 0, T0) is SENTINEL  # ongoing: nothing to verify
    append(txn_batch(1, 1), SENTINEL)
    # verification off (no guard brought): nothing is checked, as before KIP-890
    end_txn(log, 1, True)
    append(txn_batch(1, 2), None)


def test_while_verifying_a_higher_sequence_waits(tmp_path: Path) -> None:
    """The lowest sequence being verified blocks higher ones (Kafka's
    maybeUpdateLowestSequenceAndEpoch), until a newer epoch resets it."""
    log = open_log(tmp_path / "t-0")
    state = log.producer_state
    produce(log, txn_batch(1, 0, transactional=False))
    state.start_verification(1, 3, 0, T0)
    low = state.start_verification(1, 1, 0, T0)
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(txn_batch(1, 2), 0, T0, verification_guard=low)
    log.append_as_leader(txn_batch(1, 1), 0, T0, verification_guard=low)
    assert not state.verifications  # the transaction's first batch ends the verification
    state.start_verification(2, 5, 0, T0)
    state.start_verification(2, 0, 1, T0)  # a newer epoch starts over
    assert (state.verifications[2].epoch, state.verifications[2].lowest_sequence) == (1, 0)
    state.remove_expired(T0 + PRODUCER_ID_EXPIRATION_MS)
    assert not state.verifications  # lingering verifications expire with the producers


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


# ---- the aborted transaction index --------------------------------------------------------


def test_txn_index_layout_is_kafkas(tmp_path: Path) -> None:
    """Kafka's AbortedTxn: int16 version 0, then producer id, first offset, last offset and
    last stable offset as int64, big-endian, 34 bytes an entry; written only for aborts."""
    d = tmp_path / "t-0"
    log = open_log(d)
    produce(log, txn_batch(7, 0, 2))  # 0-1
    produce(log, txn_batch(8, 0))  # 2
    end_txn(log, 7, False)  # 3: LSO then is producer 8's first offset
    end_txn(log, 8, True)  # 4: a commit is not indexed
    produce(log, txn_batch(7, 2))  # 5
    end_txn(log, 7, False)  # 6
    path = d / f"{0:020d}.txnindex"
    assert path.read_bytes() == struct.pack(">hqqqq", 0, 7, 0, 3, 2) + struct.pack(
        ">hqqqq", 0, 7, 5, 6, 7
    )
    assert [tuple(t) for t in log.segments[0].txn_index.entries] == [(7, 0, 3, 2), (7, 5, 6, 7)]
    log.close()
    assert TransactionIndex(path).entries == [AbortedTxn(7, 0, 3, 2), AbortedTxn(7, 5, 6, 7)]


def test_no_txn_index_file_without_aborts(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d)
    produce(log, txn_batch(7, 0))
    end_txn(log, 7, True)
    log.close()
    assert not list(d.glob("*.txnindex"))


def aborts_log(d: Path, segment_bytes: int = 600) -> PartitionLog:
    """Twelve rounds of two interleaved transactions (producer 1's aborted every third round,
    producer 2's every fourth) over several segments."""
    log = open_log(d, LogConfig(segment_bytes=segment_bytes))
    for i in range(12):
        produce(log, txn_batch(1, 3 * i, 3, tag=b"a%d-" % i))
        produce(log, txn_batch(2, i, tag=b"b%d-" % i))
        end_txn(log, 1, i % 3 != 0)
        end_txn(log, 2, i % 4 != 0)
    return log


def all_entries(log: PartitionLog) -> list[AbortedTxn]:
    return [t for seg in log.segments for t in seg.txn_index.entries]


def test_recovery_rebuilds_the_txn_index_after_a_crash_cut(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = aborts_log(d)
    before = all_entries(log)
    assert len(before) == 7 and len(log.segments) > 3
    assert before[0] == AbortedTxn(1, 0, 4, 3)  # producer 2's transaction was still open
    last_marker = before[-1].last_offset
    log.abandon()
    # a crash: the txn indexes of the tail are lost, the last segment is cut inside a batch
    for path in d.glob("*.txnindex"):
        path.unlink()
    last_log = sorted(d.glob("*.log"))[-1]
    with open(last_log, "r+b") as f:
        f.truncate(last_log.stat().st_size - 5)
    log = open_log(d, recovery_point=0)
    after = all_entries(log)
    assert after == [t for t in before if t.last_offset < log.log_end_offset]
    assert after and after[-1].last_offset <= last_marker


def test_recovery_from_the_recovery_point_keeps_older_indexes(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = aborts_log(d)
    before = all_entries(log)
    point = log.segments[-3].base_offset
    assert any(t.last_offset < point for t in before) and any(
        t.last_offset >= point for t in before
    )
    log.abandon()
    for path in d.glob("*.txnindex"):  # the recovered segments' indexes are rebuilt...
        if int(path.name[:20]) >= point:
            path.unlink()
    log = open_log(d, recovery_point=point)
    assert all_entries(log) == before  # ...the older ones are kept as they are


def test_truncation_cuts_the_txn_index(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = aborts_log(d)
    before = all_entries(log)
    cut = before[2].last_offset  # the third abort's marker goes, and everything after it
    log.truncate_to(cut)
    assert all_entries(log) == before[:2]
    log.close()
    log = open_log(d, had_clean_shutdown=True)
    assert all_entries(log) == before[:2]


def test_retention_deletes_txn_indexes_with_their_segments(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = aborts_log(d)
    assert len(list(d.glob("*.txnindex"))) >= 2
    log.delete_records_before(log.segments[-1].base_offset)
    renames = log.take_renames()  # the removal chore's, in a worker thread
    assert renames is not None
    renames.run()
    kept = {seg.base_offset for seg in log.segments}
    for path in d.glob("*.txnindex"):
        assert int(path.name[:20]) in kept
    assert all(t.last_offset >= log.log_start_offset for t in all_entries(log))


def test_read_collects_the_aborted_transactions_of_the_range(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = aborts_log(d)
    everything = all_entries(log)
    lso = log.last_stable_offset
    with log.read(0, 1 << 20, max_offset=lso, aborted_transactions=True) as r:
        assert r.aborted_transactions == everything
    with log.read(0, 1 << 20, max_offset=lso) as r:
        assert r.aborted_transactions is None
    # a read starting after the first abort's marker, limited to one batch
    start = everything[0].last_offset + 1
    with log.read(start, 1, max_offset=lso, aborted_transactions=True) as r:
        got = r.aborted_transactions
    assert got is not None and everything[0] not in got
    assert everything[1] in got or everything[1].first_offset > start
    with log.read(lso, 1 << 20, max_offset=lso, aborted_transactions=True) as r:
        assert r.aborted_transactions == [] and not r.slices


def test_read_committed_stops_at_an_open_transaction(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    produce(log, build_record_batch([SimpleRecord(None, b"a", (), T0)]))  # 0
    produce(log, txn_batch(1, 0))  # 1, open
    produce(log, build_record_batch([SimpleRecord(None, b"b", (), T0)]))  # 2
    assert log.last_stable_offset == 1
    with log.read(0, 1 << 20, max_offset=log.last_stable_offset, aborted_transactions=True) as r:
        assert [b.base_offset for b in iter_batches(r.read())] == [0]
    end_txn(log, 1, False)
    with log.read(0, 1 << 20, max_offset=log.last_stable_offset, aborted_transactions=True) as r:
        assert [b.base_offset for b in iter_batches(r.read())] == [0, 1, 2, 3]
        assert r.aborted_transactions == [AbortedTxn(1, 1, 3, 4)]


# ---- compaction ---------------------------------------------------------------------------


def kv_txn(pid: int, seq: int, pairs: list[tuple[bytes, bytes]]) -> bytearray:
    records = [SimpleRecord(k, v, (), T0) for k, v in pairs]
    return bytearray(
        build_record_batch(
            records, producer_id=pid, producer_epoch=0, base_sequence=seq, is_transactional=True
        )
    )


def plain(pairs: list[tuple[bytes, bytes]]) -> bytearray:
    return bytearray(build_record_batch([SimpleRecord(k, v, (), T0) for k, v in pairs]))


def fill(log: PartitionLog, n: int = 24) -> None:
    """Plain records on other keys, so that what came before leaves the active segment."""
    for i in range(n):
        produce(log, plain([(b"f%d" % i, b"x" * 30)]))


def stored(log: PartitionLog) -> Iterator[Batch]:
    """Every batch in the segment files, in offset order."""
    for seg in log.segments:
        with open(seg.log.path, "rb") as f:
            yield from iter_batches(f.read(seg.size))


def markers_of(log: PartitionLog) -> list[tuple[int, int, bool]]:
    """(offset, producer id, whether it holds its record) of every control batch left."""
    return [
        (b.base_offset, b.producer_id, b.records_count > 0)
        for b in stored(log)
        if isinstance(b, RecordBatchView) and b.is_control
    ]


def values_of(log: PartitionLog) -> list[bytes | None]:
    """The values of the data records left (not the fill), in offset order."""
    return [
        None if r.value is None else bytes(r.value)
        for b in stored(log)
        if not (isinstance(b, RecordBatchView) and b.is_control)
        for r in iter_records(b)
        if not bytes(r.key or b"").startswith(b"f")
    ]


def test_compaction_removes_aborted_data_then_its_markers(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "t-0", COMPACT, clock)
    produce(log, kv_txn(1, 0, [(b"k1", b"a1"), (b"k2", b"a2")]))  # 0-1 aborted
    produce(log, kv_txn(2, 0, [(b"k1", b"c1")]))  # 2, committed, later overwritten
    m1 = end_txn(log, 1, False)  # 3
    m2 = end_txn(log, 2, True)  # 4
    produce(log, kv_txn(1, 2, [(b"k3", b"x")]))  # 5, producer 1's last data batch
    m3 = end_txn(log, 1, True)  # 6
    produce(log, plain([(b"k1", b"z")]))  # 7: c1 is superseded
    fill(log)
    assert (m1, m2, m3) == (3, 4, 6)
    aborted = AbortedTxn(1, 0, 3, 2)
    assert all_entries(log) == [aborted]

    log.compact(clock(), force=True)
    assert values_of(log) == [b"x", b"z"]  # aborted a1, a2 and the superseded c1 are gone
    # markers stay while their transactions' batches are being removed; the abort stays in
    # the (cleaned) transaction index meanwhile
    assert markers_of(log) == [(3, 1, True), (4, 2, True), (6, 1, True)]
    assert all_entries(log) == [aborted]

    log.compact(clock.advance(1), force=True)  # nothing of theirs is left: a horizon is set
    assert markers_of(log) == [(3, 1, True), (4, 2, True), (6, 1, True)]
    assert all_entries(log) == []
    log.compact(clock.advance(999), force=True)
    assert len(markers_of(log)) == 3
    log.compact(clock.advance(1), force=True)  # the horizon passed: the abort goes
    # The commits stay while their transactions have batches in the log: x, and the batch of
    # c1, kept empty because it holds producer 2's last sequence (Kafka's RETAIN_EMPTY).
    assert markers_of(log) == [(4, 2, True), (6, 1, True)]
    assert values_of(log) == [b"x", b"z"]
    assert (2, 2) in batches_of(log)
    # once producer 2 expires its empty batch goes, and then, after a horizon, its commit
    clock.advance(PRODUCER_ID_EXPIRATION_MS)
    log.apply_retention(clock())
    log.compact(clock(), force=True)
    assert (2, 2) not in batches_of(log)
    log.compact(clock.advance(1), force=True)  # nothing of its transaction left: a horizon
    assert len(markers_of(log)) == 2
    log.compact(clock.advance(1000), force=True)
    assert markers_of(log) == [(6, 1, True)]
    log.close()
    log = open_log(tmp_path / "t-0", COMPACT, clock, had_clean_shutdown=True)
    assert markers_of(log) == [(6, 1, True)] and values_of(log) == [b"x", b"z"]


def test_compaction_never_passes_an_open_transaction(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "t-0", COMPACT, clock)
    produce(log, plain([(b"k5", b"before")]))  # 0
    produce(log, kv_txn(3, 0, [(b"k5", b"open")]))  # 1: the LSO stays here
    produce(log, plain([(b"k5", b"later")]))  # 2
    fill(log)
    assert log.last_stable_offset == 1
    log.compact(clock(), force=True)
    assert log.cleaner_checkpoint <= 1
    assert values_of(log) == [b"before", b"open", b"later"]
    end_txn(log, 3, True)
    log.compact(clock(), force=True)
    assert values_of(log) == [b"later"]
