"""PartitionLog: appends, reads, offsets, rolling, timestamps, truncation, flushing."""

from __future__ import annotations

import gc
import os
import resource
import shutil
import struct
import weakref
from pathlib import Path

import pytest

from protocol.compression import CompressionType
from protocol.error_codes import ErrorCode
from protocol.errors import CorruptRecordError, KafkaError, ProtocolError
from protocol.records import (
    RecordBatchView,
    SimpleRecord,
    TimestampType,
    build_control_batch,
    build_legacy_records,
    build_record_batch,
    iter_batches,
    iter_records,
)
from storage.config import LogConfig
from storage.errors import (
    InvalidRecordError,
    InvalidTimestampError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    OffsetsOutOfOrderError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
)
from storage.file_handles import FileHandles
from storage.layout import LEADER_EPOCH_CHECKPOINT
from storage.partition_log import PartitionLog
from storage.validation import AppendOrigin

from .helpers import (
    T0,
    Clock,
    base_offsets,
    batch,
    batches_of,
    keyed,
    open_fds,
    open_log,
    read_all,
)


@pytest.fixture
def clock() -> Clock:
    return Clock()


def test_append_assigns_offsets_in_place_and_reads_back(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path / "t-0", clock=clock)
    buf = batch(3)
    info = log.append_as_leader(buf, 7, clock())
    assert (info.first_offset, info.last_offset, info.records_count) == (0, 2, 3)
    assert info.log_append_time == -1 and info.valid_bytes == len(buf)
    view = RecordBatchView(buf)  # rewritten in the caller's buffer, CRC still valid
    assert view.base_offset == 0 and view.partition_leader_epoch == 7 and view.is_valid()
    info = log.append_as_leader(batch(2, tag=1), 7, clock())
    assert (info.first_offset, info.last_offset) == (3, 4)
    assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (0, 0, 5)
    assert [r.offset for r in read_all(log)] == [0, 1, 2, 3, 4]
    with log.read(4, 1) as r:  # smaller limit than a batch: the whole batch anyway
        data = r.read()
        assert r.first_batch_offset == 3 and len(r.slices) == 1
    assert base_offsets(data) == [3]
    with log.read(0, 1, min_one_batch=False) as r:
        assert r.size == 1  # Kafka semantics: a partial batch
    log.close()


def test_read_only_buffer_is_copied(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    raw = bytes(batch(2))
    assert log.append_as_leader(raw, 0, T0).last_offset == 1
    assert RecordBatchView(raw).base_offset == 0
    log.close()


def test_offsets_out_of_range_and_high_watermark_bound(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    for i in range(5):
        log.append_as_leader(batch(2, tag=i), 0, T0)
    with pytest.raises(OffsetOutOfRangeError) as e:
        log.read(11, 100)
    assert e.value.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    with log.read(10, 100) as r:  # at the log end: empty, no error
        assert r.slices == [] and r.size == 0
    assert log.update_high_watermark(99) == 10
    assert log.update_high_watermark(4) == 4
    records = read_all(log, max_offset=log.high_watermark)
    assert [r.offset for r in records] == [0, 1, 2, 3]
    with log.read(4, 1000, max_offset=4) as r:
        assert r.size == 0
    with log.read(5, 1000, max_offset=4) as r:
        assert r.size == 0
    log.close()


def test_read_spans_segments_and_respects_max_bytes(tmp_path: Path) -> None:
    size = len(batch(1))
    log = open_log(tmp_path / "t-0", LogConfig(segment_bytes=size * 3, index_interval_bytes=1))
    for i in range(10):
        log.append_as_leader(batch(1, tag=i), 0, T0)
    assert [s.base_offset for s in log.segments] == [0, 3, 6, 9]
    with log.read(1, 10_000) as r:
        assert [s.length for s in r.slices] == [2 * size, 3 * size, 3 * size, size]
        assert base_offsets(r.read()) == list(range(1, 10))
    with log.read(1, 4 * size) as r:
        assert r.size == 4 * size and len(r.slices) == 2
    log.update_high_watermark(7)
    with log.read(2, 10_000, max_offset=log.high_watermark) as r:
        assert base_offsets(r.read()) == [2, 3, 4, 5, 6]
    log.close()


def _three_records_for_retention(tmp_path: Path) -> PartitionLog:
    """A log of three one-batch segments (and an empty active one), committed, which retention
    deletes whole at its next pass (retention.bytes 0, no delete delay)."""
    size = len(batch(1))
    config = LogConfig(segment_bytes=size, retention_bytes=0, file_delete_delay_ms=0)
    log = open_log(tmp_path / "t-0", config)
    for i in range(3):
        log.append_as_leader(batch(1, tag=i), 0, T0)
    log.update_high_watermark(3)
    return log


def test_slices_stay_readable_after_the_segment_is_deleted(tmp_path: Path) -> None:
    log = _three_records_for_retention(tmp_path)
    r = log.read(0, 10)
    assert log.apply_retention(T0) == 3
    # Forgotten at once; renamed by the removal chore (in a worker thread: here inline).
    assert log.log_start_offset == 3 and list((tmp_path / "t-0").glob("*00.log"))
    renames = log.take_renames()
    assert renames is not None and log.take_renames() is None
    renames.run()
    assert not list((tmp_path / "t-0").glob("*00.log"))
    # The caller unlinks (off the loop); a segment a reader pins waits for its release, so
    # that the last close, which frees the blocks, is not the log's thread's either.
    due = log.take_deleted_files(T0)
    files = [p for p in due if p.name.endswith(".deleted")]
    assert {p.name.split(".")[0] for p in files} == {f"{1:020d}", f"{2:020d}"}
    # ... with the producer snapshots below the new log start offset but the latest.
    snapshots = sorted(p.name for p in due if p not in files)
    assert snapshots == [f"{1:020d}.snapshot", f"{2:020d}.snapshot"]
    assert base_offsets(r.read()) == [0]
    r.release()
    (log_file,) = [p for p in log.take_deleted_files(T0) if p.name.endswith(".log.deleted")]
    assert log_file.name == f"{0:020d}.log.deleted" and log.take_deleted_files(T0) == []
    for p in due:
        p.unlink(missing_ok=True)
    config = log.config
    log.close()
    assert log_file.exists()  # left to recovery
    log = open_log(tmp_path / "t-0", config)
    assert not list((tmp_path / "t-0").glob("*.deleted"))
    log.close()


def test_validation_errors_write_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", LogConfig(max_message_bytes=500))
    corrupt = batch(2)
    corrupt[-1] ^= 1
    with pytest.raises(CorruptRecordError) as e:
        log.append_as_leader(corrupt, 0, T0)
    assert e.value.error_code == ErrorCode.CORRUPT_MESSAGE
    with pytest.raises(RecordTooLargeError) as e2:
        log.append_as_leader(batch(1, value_size=600), 0, T0)
    assert e2.value.error_code == ErrorCode.MESSAGE_TOO_LARGE
    two = batch(1) + batch(1)
    with pytest.raises(KafkaError) as e3:
        log.append_as_leader(two, 0, T0)
    assert e3.value.error_code == ErrorCode.INVALID_RECORD
    control = bytearray(build_control_batch(0, b"\x00\x00\x00\x00\x00\x00", timestamp=T0))
    with pytest.raises(KafkaError) as e4:
        log.append_as_leader(control, 0, T0)
    assert e4.value.error_code == ErrorCode.INVALID_RECORD
    with pytest.raises(ProtocolError):
        log.append_as_leader(b"\x00" * 10, 0, T0)
    assert log.log_end_offset == 0 and log.size_in_bytes == 0
    # A coordinator may write control batches (transaction markers).
    info = log.append_as_leader(control, 0, T0, origin=AppendOrigin.COORDINATOR)
    assert info.last_offset == 0
    log.close()


def test_segment_bytes_bounds_an_append(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", LogConfig(segment_bytes=200))
    with pytest.raises(RecordBatchTooLargeError):
        log.append_as_leader(batch(1, value_size=300), 0, T0)
    log.close()


def test_compacted_topic_requires_keys(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", LogConfig(cleanup_policy=("compact",)))
    with pytest.raises(InvalidRecordError) as e:
        log.append_as_leader(batch(3, key=None), 0, T0)
    assert e.value.error_code == ErrorCode.INVALID_RECORD
    assert [i for i, _ in e.value.record_errors] == [0, 1, 2]
    log.append_as_leader(batch(3), 0, T0)
    log.close()


def test_timestamp_bounds(tmp_path: Path) -> None:
    config = LogConfig(message_timestamp_before_max_ms=1000, message_timestamp_after_max_ms=10)
    log = open_log(tmp_path / "t-0", config)
    with pytest.raises(InvalidTimestampError) as e:
        log.append_as_leader(batch(2, ts=T0 - 5000), 0, T0)
    assert e.value.error_code == ErrorCode.INVALID_TIMESTAMP
    with pytest.raises(InvalidTimestampError):
        log.append_as_leader(batch(1, ts=T0 + 11), 0, T0)
    log.append_as_leader(batch(2, ts=T0 - 1000), 0, T0)
    log.close()


def test_log_append_time(tmp_path: Path) -> None:
    config = LogConfig(message_timestamp_type=TimestampType.LOG_APPEND_TIME)
    log = open_log(tmp_path / "t-0", config)
    buf = batch(3, ts=5)
    info = log.append_as_leader(buf, 0, T0 + 123)
    assert info.log_append_time == T0 + 123 and info.max_timestamp == T0 + 123
    view = RecordBatchView(buf)
    assert view.timestamp_type == TimestampType.LOG_APPEND_TIME and view.is_valid()
    assert [r.timestamp for r in read_all(log)] == [T0 + 123] * 3
    assert log.offset_for_timestamp(T0 + 100) == (0, T0 + 123, 0)
    # A producer must not claim LogAppendTime itself.
    lat = bytearray(
        build_record_batch(
            [SimpleRecord(b"k", b"v", (), 1)],
            timestamp_type=TimestampType.LOG_APPEND_TIME,
            log_append_time=9,
        )
    )
    with pytest.raises(InvalidTimestampError):
        log.append_as_leader(lat, 0, T0)
    log.close()


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("compression", [CompressionType.NONE, CompressionType.GZIP])
def test_legacy_message_sets_are_stored_as_v2(tmp_path: Path, magic: int, compression: int) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(batch(1), 0, T0)
    records = [SimpleRecord(b"k%d" % i, b"v%d" % i, (), T0 + i) for i in range(4)]
    legacy = build_legacy_records(records, magic=magic, compression=compression)
    info = log.append_as_leader(legacy, 2, T0)
    assert (info.first_offset, info.last_offset, info.records_count) == (1, 4, 4)
    stored = read_all(log, 1)
    assert [(r.offset, r.key, r.value) for r in stored] == [
        (1 + i, b"k%d" % i, b"v%d" % i) for i in range(4)
    ]
    expected_ts = [T0 + i for i in range(4)] if magic == 1 else [-1] * 4
    assert [r.timestamp for r in stored] == expected_ts
    with log.read(1, 1000) as r:
        (b,) = list(iter_batches(r.read()))
    assert isinstance(b, RecordBatchView) and b.compression == compression
    assert b.partition_leader_epoch == 2
    log.close()


def test_compression_type_recompresses(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", LogConfig(compression_type="zstd"))
    log.append_as_leader(batch(5, compression=CompressionType.GZIP), 0, T0)
    with log.read(0, 10_000) as r:
        (b,) = list(iter_batches(r.read()))
    assert isinstance(b, RecordBatchView) and b.compression == CompressionType.ZSTD
    assert [r.offset for r in iter_records(b)] == [0, 1, 2, 3, 4]
    log.close()


def test_follower_append(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    leader = [
        bytearray(
            build_record_batch(
                [SimpleRecord(b"k", b"v", (), T0)] * 2, base_offset=o, partition_leader_epoch=e
            )
        )
        for o, e in [(0, 1), (2, 1), (10, 3)]
    ]
    blob = b"".join(leader)
    info = log.append_as_follower(blob + leader[0][:30])  # a partial trailing batch
    assert (info.first_offset, info.last_offset, info.valid_bytes) == (0, 11, len(blob))
    assert log.log_end_offset == 12
    assert batches_of(log) == [(0, 1), (2, 3), (10, 11)]
    assert log.leader_epoch_cache.entries == [(1, 0), (3, 10)]
    with pytest.raises(UnexpectedAppendOffsetError):
        log.append_as_follower(leader[2])
    out_of_order = bytearray(build_record_batch([SimpleRecord(b"k", b"v")], base_offset=20))
    out_of_order += build_record_batch([SimpleRecord(b"k", b"v")], base_offset=20)
    with pytest.raises(OffsetsOutOfOrderError):
        log.append_as_follower(out_of_order)
    assert log.append_as_follower(b"").first_offset == -1
    log.close()


@pytest.mark.parametrize("fails", [False, True])
def test_follower_append_written_off_the_thread(tmp_path: Path, fails: bool) -> None:
    """begin_follower_append checks and pins; until the chore's commit the log reads as before
    and has that one writer; a failed write is cut back and raised by the commit."""
    log = open_log(tmp_path / "t-0")
    log.append_as_follower(build_record_batch([SimpleRecord(b"k", b"v", (), T0)] * 2))
    data = build_record_batch([SimpleRecord(b"k", b"w", (), T0)] * 3, base_offset=2)
    size = log.active_segment.size
    append = log.begin_follower_append(memoryview(data))
    assert append is not None and log.writing and log.log_end_offset == 2
    with pytest.raises(RuntimeError):
        log.append_as_follower(data)
    with pytest.raises(RuntimeError):
        log.begin_truncation(1)
    if fails:
        append.fd = os.open(os.devnull, os.O_RDONLY)  # the write fails with EBADF
        try:
            append.prepare()
        finally:
            os.close(append.fd)
        assert isinstance(append.error, OSError)
        with pytest.raises(KafkaStorageError):
            append.commit()
        assert log.log_end_offset == 2 and log.active_segment.size == size
        assert os.path.getsize(log.active_segment.log.path) == size
    else:
        append.prepare()
        assert log.log_end_offset == 2  # written, not committed
        append.commit()
        assert log.log_end_offset == 5 and batches_of(log) == [(0, 1), (2, 4)]
    assert not log.writing
    assert log.active_segment.log.pins == 0
    log.close()


def test_timestamp_lookup(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=400, index_interval_bytes=50)
    log = open_log(tmp_path / "t-0", config)
    # timestamps: batch i holds T0 + 10*i and T0 + 10*i + 1; batch 7 has the max timestamp
    for i in range(20):
        ts = T0 + 10 * i if i != 7 else T0 + 10_000
        log.append_as_leader(batch(2, ts=ts, tag=i), i // 5, T0)
    assert len(log.segments) > 3
    assert log.offset_for_timestamp(T0) == (0, T0, 0)
    assert log.offset_for_timestamp(T0 + 1) == (1, T0 + 1, 0)
    assert log.offset_for_timestamp(T0 + 2) == (2, T0 + 10, 0)
    assert log.offset_for_timestamp(T0 + 95) == (14, T0 + 10_000, 1)  # batch 7 (14..15)
    assert log.offset_for_timestamp(T0 + 10_001) == (15, T0 + 10_001, 1)
    assert log.offset_for_timestamp(T0 + 60) == (12, T0 + 60, 1)
    assert log.offset_for_timestamp(T0 + 191) == (14, T0 + 10_000, 1)
    assert log.offset_for_timestamp(T0 + 20_000) is None
    assert log.offset_for_timestamp(-1) == (40, -1, 3)
    assert log.offset_for_timestamp(-2) == (0, -1, 0)
    assert log.offset_for_timestamp(-3) == (15, T0 + 10_001, 1)
    log.update_high_watermark(40)
    log.delete_records_before(17)
    assert log.offset_for_timestamp(T0 + 1) == (17, T0 + 81, 1)
    assert log.offset_for_timestamp(-2) == (17, -1, 1)
    log.close()


def test_rolls_on_segment_ms_and_full_indexes(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path / "t-0", LogConfig(segment_ms=1000), clock)
    log.append_as_leader(batch(1, ts=T0), 0, clock())
    log.append_as_leader(batch(1, ts=T0 + 1000), 0, clock())
    assert len(log.segments) == 1
    log.append_as_leader(batch(1, ts=T0 + 1001), 0, clock())  # by record timestamps
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()
    # index.interval.bytes 0: every batch after the first is indexed; 3 entries fill it
    config = LogConfig(segment_index_bytes=24, index_interval_bytes=0)
    log = open_log(tmp_path / "u-0", config, clock)
    for i in range(10):
        log.append_as_leader(batch(1, tag=i), 0, clock())
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 2
    for seg in log.segments[:-1]:
        assert seg.offset_index.entries <= seg.offset_index.max_entries
        assert os.path.getsize(seg.offset_index.path) == seg.offset_index.entries * 8
    assert [r.offset for r in read_all(log)] == list(range(10))
    log.close()


def test_truncate_to(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0", LogConfig(segment_bytes=300, index_interval_bytes=1))
    for i in range(12):
        log.append_as_leader(batch(2, tag=i), i // 4, T0)
    log.update_high_watermark(20)
    assert not log.truncate_to(24)
    assert log.truncate_to(15)  # inside batch 14..15: the batch goes whole
    assert log.log_end_offset == 15 and log.high_watermark == 15
    assert batches_of(log)[-1] == (12, 13)
    assert [e.epoch for e in log.leader_epoch_cache.entries] == [0, 1]  # epoch 2 began at 16
    assert log.truncate_to(8)
    assert batches_of(log)[-1] == (6, 7)
    assert [e.epoch for e in log.leader_epoch_cache.entries] == [0]
    assert log.end_offset_for_epoch(0) == (0, 8)
    info = log.append_as_leader(batch(1), 5, T0)
    assert info.first_offset == 8
    assert log.end_offset_for_epoch(0) == (0, 8) and log.end_offset_for_epoch(3) == (0, 8)
    assert log.end_offset_for_epoch(5) == (5, 9) and log.end_offset_for_epoch(6) == (-1, -1)
    assert [r.offset for r in read_all(log)] == list(range(9))
    log.close()
    log = open_log(tmp_path / "t-0", LogConfig(segment_bytes=300), had_clean_shutdown=True)
    assert log.log_end_offset == 9
    log.truncate_fully_and_start_at(100)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (100, 100, 100)
    assert log.append_as_leader(batch(1), 6, T0).first_offset == 100
    log.close()


def test_delete_records(tmp_path: Path) -> None:
    size = len(batch(1))
    log = open_log(tmp_path / "t-0", LogConfig(segment_bytes=size * 2, file_delete_delay_ms=0))
    for i in range(10):
        log.append_as_leader(batch(1, tag=i), 0, T0)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(1)  # above the high watermark (0)
    log.update_high_watermark(7)
    assert log.delete_records_before(5) == 5
    assert [s.base_offset for s in log.segments] == [4, 6, 8]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 100)
    assert read_all(log)[0].offset == 5
    assert log.delete_records_before(-1) == 7
    assert log.delete_records_before(3) == 7
    log.close()


def test_flush_recovery_point_and_group_commit(tmp_path: Path, clock: Clock) -> None:
    log = open_log(tmp_path / "t-0", clock=clock)
    log.append_as_leader(batch(2), 0, clock(), sync=False)
    assert log.recovery_point == 0
    pending = log.begin_flush()
    assert pending is not None
    log.append_as_leader(batch(2), 0, clock(), sync=False)  # during the fsync
    pending.prepare()
    pending.commit()
    assert log.recovery_point == 2
    log.flush()
    assert log.recovery_point == 4
    assert log.begin_flush() is None
    assert (tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT).read_text() == "0\n1\n0 0\n"
    log.close()
    log = open_log(tmp_path / "u-0", LogConfig(flush_messages=3), clock)
    log.append_as_leader(batch(2), 0, clock())
    assert log.recovery_point == 0
    log.append_as_leader(batch(2), 0, clock())
    assert log.recovery_point == 4
    log.close()
    log = open_log(tmp_path / "v-0", LogConfig(fsync_before_ack=True), clock)
    log.append_as_leader(batch(2), 0, clock())
    assert log.recovery_point == 2
    log.close()
    log = open_log(tmp_path / "w-0", LogConfig(flush_ms=1000), clock)
    log.append_as_leader(batch(1), 0, clock())
    assert log.recovery_point == 0
    log.append_as_leader(batch(1), 0, clock.advance(1000))
    assert log.recovery_point == 2
    log.close()


def test_clean_open_does_not_scan_unclean_open_does(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=500, index_interval_bytes=100)
    log = open_log(tmp_path / "t-0", config)
    for i in range(30):
        log.append_as_leader(batch(2, tag=i), 0, T0)
    leo = log.log_end_offset
    log.close()
    for seg_path in (tmp_path / "t-0").glob("*.index"):
        assert seg_path.stat().st_size % 8 == 0
    clean = open_log(tmp_path / "t-0", config, had_clean_shutdown=True)
    assert clean.recovery_stats["recovered_segments"] == 0
    assert clean.log_end_offset == leo == clean.recovery_point
    assert [r.offset for r in read_all(clean)] == list(range(leo))
    clean.abandon()
    unclean = open_log(tmp_path / "t-0", config, recovery_point=0)
    assert unclean.recovery_stats["recovered_segments"] == len(unclean.segments)
    assert unclean.log_end_offset == leo and unclean.recovery_point == 0
    unclean.close()


def test_leader_epoch_checkpoint_rebuilt_after_a_crash(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(batch(1), 1, T0)
    log.flush()
    log.append_as_leader(batch(1), 2, T0)
    log.append_as_leader(batch(1), 4, T0)
    log.abandon()  # epochs 2 and 4 never reached the checkpoint file
    log = open_log(tmp_path / "t-0", recovery_point=1)
    assert log.leader_epoch_cache.entries == [(1, 0), (2, 1), (4, 2)]
    log.close()


def test_corrupt_index_is_rebuilt_lazily(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=400, index_interval_bytes=50)
    log = open_log(tmp_path / "t-0", config)
    for i in range(20):
        log.append_as_leader(batch(2, tag=i), 0, T0)
    log.close()
    first = tmp_path / "t-0" / "00000000000000000000.index"
    first.write_bytes(struct.pack(">iiii", 9, 300, 3, 100))
    log = open_log(tmp_path / "t-0", config, had_clean_shutdown=True)
    assert [r.offset for r in read_all(log)] == list(range(40))
    log.close()


def test_preallocate(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=1000, preallocate=True)
    log = open_log(tmp_path / "t-0", config)
    log.append_as_leader(batch(2), 0, T0)
    active = log.active_segment.log.path
    assert active.stat().st_size == 1000
    log.close()
    assert active.stat().st_size < 1000
    log = open_log(tmp_path / "t-0", config, recovery_point=0)  # a crash with zeros is fine too
    assert log.log_end_offset == 2
    log.close()


def test_keyed_helper_roundtrip(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(keyed([(b"a", b"1"), (b"b", None)]), 0, T0)
    assert [(r.key, r.value) for r in read_all(log)] == [(b"a", b"1"), (b"b", None)]
    log.close()


def test_deleted_segments_are_freed_without_the_collector(tmp_path: Path) -> None:
    """The broker freezes its heap (`wirebroker.gc_freeze`), where a reference cycle that
    becomes garbage is never collected: the segments retention deletes, and a deleted log's,
    must be freed by reference counting alone (each segment's file handle calls it back when
    closed: once detached, it lets go)."""
    log = _three_records_for_retention(tmp_path)
    gc.collect()
    gc.disable()
    try:
        r = log.read(0, 10)  # a reader pins the first segment's file across its deletion
        retained = [weakref.ref(seg) for seg in log.segments if seg.base_offset < 3]
        assert log.apply_retention(T0) == 3
        renames = log.take_renames()
        assert renames is not None
        renames.run()
        for path in log.take_deleted_files(T0):
            path.unlink(missing_ok=True)
        r.release()
        del r
        for path in log.take_deleted_files(T0):  # the pinned one, once released
            path.unlink(missing_ok=True)
        assert [ref() for ref in retained] == [None] * 3
        kept = [weakref.ref(seg) for seg in log.segments]
        shutil.rmtree(log.delete())
        del log
        assert [ref() for ref in kept] == [None] * len(kept)
    finally:
        gc.enable()


def test_a_deleted_or_abandoned_log_closes_every_descriptor_it_opened(tmp_path: Path) -> None:
    """Found by `make soak`: a deleted topic's segments kept their ``.index`` and
    ``.timeindex`` descriptors open in the broker's shared pool (until evicted, at half the
    open-file limit), holding the unlinked files' blocks."""
    handles = FileHandles()
    config = LogConfig(segment_bytes=len(batch(1)))
    for name, end in (("deleted-0", PartitionLog.delete), ("abandoned-0", PartitionLog.abandon)):
        log = open_log(tmp_path / name, config, handles=handles)
        for i in range(3):
            log.append_as_leader(batch(1, tag=i), 0, T0)
        log.flush()  # every segment's indexes written through the pool
        assert handles.statistics()["open"] > 3
        end(log)
        assert handles.statistics()["open"] == 0, name


def test_delete_renames_the_directory(tmp_path: Path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(batch(1), 0, T0)
    r = log.read(0, 100)
    renamed = log.delete()  # the caller removes it (off the loop)
    assert list(tmp_path.iterdir()) == [renamed] and renamed.name.endswith("-delete")
    shutil.rmtree(renamed)
    assert len(r.read()) == r.size  # still readable while pinned
    r.release()
    assert isinstance(PartitionLog, type)


def test_descriptors_stay_bounded_with_many_segments(tmp_path: Path) -> None:
    """Flush, reads and close of a log with hundreds of unflushed segments under a
    descriptor limit far below the segment count."""
    handles = FileHandles(max_open=8)
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=200), handles=handles)
    for i in range(400):
        log.append_as_leader(batch(1, value_size=100, tag=i), 0, T0)
    assert len(log.segments) >= 400
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (open_fds() + 24, hard))
    try:
        log.flush()
        assert log.recovery_point == 400
        with log.read(0, 1 << 20) as r:
            assert len(r.slices) == 8  # a read pins at most 8 segments
        assert [r.offset for r in read_all(log)] == list(range(400))
        log.close()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=200), handles=handles)
    assert log.log_end_offset == 400
    log.close()


def test_the_active_segment_locates_its_last_batches_as_its_index_and_file_do(
    tmp_path: Path, clock: Clock
) -> None:
    """`LogSegment.locate` answers the tail from the positions it kept at append time; it must
    agree with `translate_offset` (index probe and file scan) after appends, a truncation and
    a roll, where the kept positions are dropped."""
    log = open_log(tmp_path / "t-0", LogConfig(segment_bytes=4_000), clock=clock)

    def check() -> None:
        for seg in log.segments:
            for offset in range(seg.base_offset - 1, log.log_end_offset + 2):
                h = seg.translate_offset(offset)
                expected = None if h is None else (h.position, h.size, h.base_offset)
                assert seg.locate(offset) == expected, (seg, offset)

    for n in range(1, 90):
        log.append_as_leader(batch(1 + n % 3, tag=n), 0, clock())
    assert len(log.segments) > 2
    check()
    log.truncate_to(log.log_end_offset - 5)
    check()
    for n in range(10):
        log.append_as_leader(batch(2, tag=n), 0, clock())
    check()
    log.close()


@pytest.mark.parametrize("checkpointed", [True, False])
def test_a_crash_before_deleted_segments_are_renamed(tmp_path: Path, checkpointed: bool) -> None:
    """Retention forgets segments at once and leaves their renames to the removal chore: a
    crash in between finds them under their names. With the log start offset checkpointed
    since, they lie below it (unread, deleted again by retention); without, the log is back
    as before the deletion, whole."""
    size = len(batch(1))
    config = LogConfig(segment_bytes=size, retention_bytes=2 * size, file_delete_delay_ms=0)
    directory = tmp_path / "t-0"
    log = open_log(directory, config)
    for i in range(6):
        log.append_as_leader(batch(1, tag=i), 0, T0)
    log.update_high_watermark(6)
    expected = [bytes(r.value or b"") for r in read_all(log)]
    assert log.apply_retention(T0) == 4 and log.log_start_offset == 4
    log.abandon()  # what a crash leaves
    assert len(list(directory.glob("*.log"))) == 6 and not list(directory.glob("*.deleted"))
    start = 4 if checkpointed else 0
    log = open_log(directory, config, log_start_offset=start, high_watermark=6, recovery_point=6)
    assert log.log_start_offset == start
    assert [s.base_offset for s in log.segments] == list(range(6))
    assert [bytes(r.value or b"") for r in read_all(log)] == expected[start:]
    assert log.apply_retention(T0) == 4 and log.log_start_offset == 4
    renames = log.take_renames()
    assert renames is not None
    renames.run()
    assert [bytes(r.value or b"") for r in read_all(log)] == expected[4:]
    assert sorted(int(p.name[:20]) for p in directory.glob("*.log")) == [4, 5]
    log.close()


def test_a_truncation_below_the_log_start_renames_what_is_left_first(tmp_path: Path) -> None:
    """A follower told to start below its log start makes a segment whose base offset may be
    that of a segment deleted from the start whose renames a removal chore has not made yet:
    the truncation makes them first, on its thread, so the late chore renames nothing."""
    size = len(batch(1))
    directory = tmp_path / "t-0"
    log = open_log(directory, LogConfig(segment_bytes=size))
    for i in range(4):
        log.append_as_leader(batch(1, tag=i), 0, T0)
    log.update_high_watermark(4)
    assert log.delete_records_before(2) == 2
    renames = log.take_renames()
    assert renames is not None and (directory / f"{1:020d}.log").exists()
    log.truncate_fully_and_start_at(1)
    assert (directory / f"{1:020d}.log.deleted").exists()
    renames.run()  # the removal chore's worker, late
    assert renames.done and (directory / f"{1:020d}.log").exists()
    log.append_as_leader(batch(1, tag=9), 0, T0)
    assert [s.base_offset for s in log.segments] == [1]
    assert [(r.offset, r.value) for r in read_all(log)] == [(1, bytes([9]) * 20)]
    log.close()


def test_list_offsets_by_timestamp_reads_ahead_what_it_needs(tmp_path: Path) -> None:
    """`timestamp_reads` says what a lookup by timestamp would read from the disk: after a
    start, the old segments' time index tails and the whole time index of the one that has
    the timestamp, then its offset index; once run (in a worker thread) and finished, the
    lookup finds everything in memory."""
    size = len(batch(1))
    directory = tmp_path / "t-0"
    config = LogConfig(segment_bytes=size * 3, index_interval_bytes=1, retention_ms=-1)
    log = open_log(directory, config)
    for i in range(15):
        log.append_as_leader(batch(1, ts=T0 + 1000 * i, tag=i), 0, T0)
    log.close()
    log = open_log(directory, config, had_clean_shutdown=True)
    old = log.segments[:-1]
    assert not any(s.time_index.loaded or s.offset_index.loaded for s in old)
    rounds = []
    while (reads := log.timestamp_reads(T0 + 7000)) is not None:
        rounds.append(type(reads).__name__)
        reads.pin()
        reads.run()
        reads.finish()
        assert len(rounds) < 4
    assert rounds == ["TimestampReads", "LookupReads"]
    assert old[2].time_index.loaded and old[2].offset_index.loaded
    assert not old[3].time_index.loaded  # past the segment that has it: not read
    assert old[0].known_max_timestamp() == T0 + 2000  # its tail only
    assert not old[0].time_index.loaded
    found = log.offset_for_timestamp(T0 + 7000)
    assert found is not None and (found.offset, found.timestamp) == (7, T0 + 7000)
    log.close()


@pytest.mark.parametrize("policy", ["delete", "compact"])
def test_the_mtimes_of_segments_without_timestamps_are_read_ahead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str
) -> None:
    """Segments whose records carry no timestamp count by their file's mtime (Kafka's
    largest timestamp) for ``retention.ms`` and ``min.compaction.lag.ms``: the reads the log
    asks for first (`retention_reads`, `compaction_reads`) stat them in a worker thread, and
    the retention pass (the cleaner's range) then stats none on the log's thread. Two days
    old: the first three segments; the lag and the retention: one day."""
    import threading

    from storage.cleaner import cleanable_range

    day = 24 * 3600 * 1000
    size = len(batch(1, ts=-1))
    config = LogConfig(
        segment_bytes=size * 2,
        cleanup_policy=(policy,),
        retention_ms=day,
        min_compaction_lag_ms=day,
        file_delete_delay_ms=0,
    )
    directory = tmp_path / "t-0"
    log = open_log(directory, config)
    for i in range(12):
        log.append_as_leader(batch(1, ts=-1, tag=i), 0, T0)
    log.close()
    now = int(os.stat(directory).st_mtime * 1000)
    bases = sorted(int(p.name[:20]) for p in directory.glob("*.log"))
    for base in bases[:3]:
        old = (now - 2 * day) * 1_000_000
        os.utime(directory / f"{base:020d}.log", ns=(old, old))
    log = open_log(directory, config, had_clean_shutdown=True)
    log.update_high_watermark(12)
    stats: list[int] = []  # the threads that stat a segment file
    stat = os.stat

    def stating(path: object, *args: object, **kwargs: object) -> os.stat_result:
        if os.fspath(path).endswith(".log"):  # type: ignore[call-overload]
            stats.append(threading.get_ident())
        return stat(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "stat", stating)
    reads = log.retention_reads(now) if policy == "delete" else log.compaction_reads(now)
    assert reads is not None
    reads.pin()
    worker = threading.Thread(target=reads.run)
    worker.start()
    worker.join()
    reads.finish()
    assert len(stats) == 4 and threading.get_ident() not in stats  # up to the first young one
    if policy == "delete":
        assert log.apply_retention(now) == 3
        assert log.log_start_offset == bases[3]
    else:
        assert cleanable_range(log, now) == (0, bases[3])
    assert threading.get_ident() not in stats
    log.close()
