"""Idempotent producer state: the client rules, snapshots in Kafka's format, and PartitionLog's
duplicate handling across rolls, clean reopens and crashes (with a hypothesis model)."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.record_batch import SimpleRecord
from protocol.records import build_record_batch
from storage.config import LogConfig
from storage.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from storage.partition_log import PartitionLog
from storage.producer_state import (
    INT32_MAX,
    PRODUCER_ID_EXPIRATION_MS,
    BatchMetadata,
    BatchUpdate,
    CorruptSnapshotError,
    ProducerEntry,
    ProducerStateManager,
    last_sequence,
    read_snapshot,
    snapshot_offsets,
    write_snapshot,
)

from .helpers import T0, Clock, open_log, read_all

PID = 1000


def pbatch(seq: int, n: int = 1, *, pid: int = PID, epoch: int = 0, tag: bytes = b"v") -> bytearray:
    records = [SimpleRecord(None, tag + b"%d" % (seq + i), (), T0 + i) for i in range(n)]
    return bytearray(
        build_record_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    )


def upd(seq: int, n: int = 1, *, epoch: int = 0, offset: int = 0, pid: int = PID) -> BatchUpdate:
    meta = BatchMetadata(seq, last_sequence(seq, n - 1), offset, offset + n - 1, T0)
    return BatchUpdate(pid, epoch, meta, False)


# ---- the rules ---------------------------------------------------------------------------


def test_unknown_producer_may_start_at_any_sequence(tmp_path: Path) -> None:
    m = ProducerStateManager(tmp_path)
    assert m.check(upd(42)) is None


def test_duplicate_gap_and_old_epoch(tmp_path: Path) -> None:
    m = ProducerStateManager(tmp_path)
    for i in range(7):
        u = upd(i * 2, 2, epoch=3, offset=i * 2)
        assert m.check(u) is None
        m.update(u)
    # the last five batches are duplicates, with their original offsets
    for i in range(2, 7):
        dup = m.check(upd(i * 2, 2, epoch=3))
        assert dup is not None and dup.first_offset == i * 2
    # older than the retained five: out of order, as in Kafka
    with pytest.raises(OutOfOrderSequenceError):
        m.check(upd(2, 2, epoch=3))
    with pytest.raises(OutOfOrderSequenceError):
        m.check(upd(15, 1, epoch=3))  # gap: 14 expected
    with pytest.raises(InvalidProducerEpochError):
        m.check(upd(14, 1, epoch=2))
    assert m.check(upd(14, 1, epoch=3)) is None
    # a new epoch restarts at sequence 0
    with pytest.raises(OutOfOrderSequenceError):
        m.check(upd(14, 1, epoch=4))
    assert m.check(upd(0, 1, epoch=4)) is None
    # a different producer is independent
    assert m.check(upd(9, pid=PID + 1)) is None


def test_sequence_wraps_after_int32_max(tmp_path: Path) -> None:
    m = ProducerStateManager(tmp_path)
    u = upd(INT32_MAX - 1, 3)
    assert u.batch.last_seq == 0
    m.update(u)
    assert m.check(upd(1)) is None
    m2 = ProducerStateManager(tmp_path)
    m2.update(upd(INT32_MAX - 1, 2))
    assert m2.check(upd(0)) is None


# ---- snapshots ---------------------------------------------------------------------------


entries_strategy = st.lists(
    st.builds(
        lambda pid, epoch, seq, n, off, ts: (pid, epoch, seq, n, off, ts),
        st.integers(0, 2**63 - 1),
        st.integers(0, 32766),
        st.integers(0, INT32_MAX),
        st.integers(1, 1000),
        st.integers(0, 2**40),
        st.integers(-1, 2**45),
    ),
    max_size=20,
    unique_by=lambda t: t[0],
)


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(entries_strategy)
def test_snapshot_round_trip(
    tmp_path: Path, raw: list[tuple[int, int, int, int, int, int]]
) -> None:
    entries = []
    for pid, epoch, seq, n, off, ts in raw:
        e = ProducerEntry(pid, epoch, last_timestamp=ts)
        e.add_batch(BatchMetadata(seq, last_sequence(seq, n - 1), off, off + n - 1, ts))
        entries.append(e)
    path = tmp_path / "00000000000000000007.snapshot"
    write_snapshot(path, entries)
    back = read_snapshot(path)
    assert [
        (e.producer_id, e.epoch, e.last_seq, e.last_offset, e.last_timestamp) for e in back
    ] == [(e.producer_id, e.epoch, e.last_seq, e.last_offset, e.last_timestamp) for e in entries]


def test_snapshot_layout_is_kafkas(tmp_path: Path) -> None:
    e = ProducerEntry(7, 2, last_timestamp=99)
    e.add_batch(BatchMetadata(10, 14, 100, 104, 99))
    path = tmp_path / "00000000000000000105.snapshot"
    write_snapshot(path, [e])
    data = path.read_bytes()
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count) == (1, 1)
    assert crc == crc32c.crc32c(data[6:])
    assert struct.unpack_from(">qhiqiqiq", data, 10) == (7, 2, 14, 104, 4, 99, -1, -1)
    corrupt = bytearray(data)
    corrupt[-1] ^= 1
    path.write_bytes(bytes(corrupt))
    with pytest.raises(CorruptSnapshotError):
        read_snapshot(path)


# ---- in the partition log ----------------------------------------------------------------


def test_duplicate_append_returns_original_offsets_and_writes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(bytearray(build_record_batch([SimpleRecord(None, b"x", (), T0)])), 0, T0)
    first = log.append_as_leader(pbatch(0, 3), 0, T0)
    second = log.append_as_leader(pbatch(3, 2), 0, T0)
    again = log.append_as_leader(pbatch(0, 3), 0, T0)
    assert again.duplicate and (again.first_offset, again.last_offset) == (1, 3)
    assert not first.duplicate and second.first_offset == 4
    assert log.log_end_offset == 6
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(pbatch(9), 0, T0)
    assert log.append_as_leader(pbatch(0, epoch=1), 0, T0).first_offset == 6
    with pytest.raises(InvalidProducerEpochError):
        log.append_as_leader(pbatch(5), 0, T0)
    assert log.log_end_offset == 7
    log.close()


def test_state_survives_roll_clean_reopen_and_crash(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=400)
    d = tmp_path / "t-0"
    log = open_log(d, config)
    for i in range(20):
        log.append_as_leader(pbatch(i * 2, 2), 0, T0)
    assert len(log.segments) > 2
    assert snapshot_offsets(d), "a roll takes a snapshot"
    log.close()
    assert snapshot_offsets(d)[-1] == 40
    log = open_log(d, config, had_clean_shutdown=True)
    assert log.append_as_leader(pbatch(38, 2), 0, T0).first_offset == 38
    log.append_as_leader(pbatch(40, 2), 0, T0)
    log.append_as_leader(pbatch(42, 2), 0, T0)
    log.abandon()  # crash: no snapshot at 44
    log = open_log(d, config)
    dup = log.append_as_leader(pbatch(40, 2), 0, T0)
    assert dup.duplicate and dup.first_offset == 40
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(pbatch(46), 0, T0)
    assert log.append_as_leader(pbatch(44), 0, T0).first_offset == 44
    log.close()


def test_corrupt_snapshot_falls_back_to_scanning(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d)
    for i in range(5):
        log.append_as_leader(pbatch(i), 0, T0)
    log.close()
    (d / "00000000000000000005.snapshot").write_bytes(b"garbage")
    log = open_log(d)
    assert log.append_as_leader(pbatch(4), 0, T0).duplicate
    log.close()


def test_truncation_reloads_state(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d, LogConfig(segment_bytes=300))
    for i in range(10):
        log.append_as_leader(pbatch(i), 0, T0)
    log.truncate_to(6)
    assert all(o <= 6 for o in snapshot_offsets(d))
    assert log.append_as_leader(pbatch(5), 0, T0).duplicate
    assert log.append_as_leader(pbatch(6), 0, T0).first_offset == 6
    log.close()


# ---- a model: retries of random earlier batches, with reopens and crashes -----------------


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("send"), st.integers(1, 4)),
            st.tuples(st.just("retry"), st.integers(1, 8)),
            st.tuples(st.just("reopen"), st.booleans()),
        ),
        max_size=40,
    )
)
def test_retries_never_duplicate(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int]]
) -> None:
    d = tmp_path_factory.mktemp("p") / "t-0"
    config = LogConfig(segment_bytes=500)
    clock = Clock()
    log = PartitionLog.open(d, config, now_ms=clock)
    sent: list[tuple[int, int, int]] = []  # (first seq, count, first offset)
    next_seq = 0
    for op, arg in ops:
        if op == "send":
            info = log.append_as_leader(pbatch(next_seq, arg), 0, T0)
            assert not info.duplicate and info.first_offset == log.log_end_offset - arg
            sent.append((next_seq, arg, info.first_offset))
            next_seq += arg
        elif op == "retry" and sent:
            back = min(arg, len(sent))
            seq, n, offset = sent[-back]
            if back <= 5:
                info = log.append_as_leader(pbatch(seq, n), 0, T0)
                assert info.duplicate and info.first_offset == offset
            else:
                with pytest.raises(OutOfOrderSequenceError):
                    log.append_as_leader(pbatch(seq, n), 0, T0)
        elif op == "reopen":
            if arg:
                log.close()
            else:
                log.abandon()
            log = PartitionLog.open(d, config, now_ms=clock, had_clean_shutdown=bool(arg))
    assert [r.value for r in read_all(log)] == [b"v%d" % s for s in range(next_seq)]
    log.close()


def test_all_five_batches_survive_a_clean_restart(tmp_path: Path) -> None:
    d = tmp_path / "t-0"
    log = open_log(d)
    for i in range(8):
        log.append_as_leader(pbatch(i), 0, T0)
    log.close()
    log = open_log(d, had_clean_shutdown=True)
    for i in range(3, 8):
        assert log.append_as_leader(pbatch(i), 0, T0).first_offset == i
    with pytest.raises(OutOfOrderSequenceError):
        log.append_as_leader(pbatch(2), 0, T0)
    assert log.log_end_offset == 8
    log.close()


def test_idle_producers_expire(tmp_path: Path) -> None:
    clock = Clock()
    d = tmp_path / "t-0"
    log = open_log(d, clock=clock)
    log.append_as_leader(pbatch(0), 0, T0)
    log.append_as_leader(pbatch(0, pid=PID + 1, tag=b"w"), 0, T0)
    clock.advance(3_600_000)
    log.append_as_leader(pbatch(1, pid=PID + 1, tag=b"w"), 0, T0)
    log.producer_state.producers[PID + 1].last_timestamp = clock.now
    clock.advance(PRODUCER_ID_EXPIRATION_MS - 1_000)
    log.apply_retention(clock.now)
    assert set(log.producer_state.producers) == {PID + 1}
    log.close()
    clock.advance(3_600_000)
    log = open_log(d, clock=clock, had_clean_shutdown=True)
    assert log.producer_state.producers == {}
    log.close()


def test_a_producer_entry_keeps_its_batches_in_little_memory() -> None:
    # A broker keeps an entry per producer id and partition for producer.id.expiration.ms (a
    # day): clients that make a producer per task leave many. A bounded deque took 760 bytes.
    e = ProducerEntry(7, 0)
    for i in range(7):
        e.add_batch(BatchMetadata(i, i, i, i, 0))
    assert [b.first_seq for b in e.batches] == [2, 3, 4, 5, 6]
    assert sys.getsizeof(e.batches) < 200
