"""The next segment prepared ahead of a roll (storage.roll_work): the roll adopts its files.

A log told where to ask (``on_roll_work``, as the log manager sets it) asks once its active
segment is half way to a roll; the chore makes ``next.*.prepared``; the roll renames them. Each
test checks what the roll must still guarantee: the triggering append in the new segment,
dense offsets, the files Kafka expects, and a crash or a restart at any point recovering.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from protocol.record_batch import SimpleRecord
from protocol.records import build_record_batch
from storage.chore import run_chore
from storage.config import LogConfig
from storage.errors import KafkaStorageError
from storage.log_manager import LogManager
from storage.partition_log import PartitionLog
from storage.producer_state import snapshot_offsets
from storage.roll_work import RollWork

from .helpers import T0, Clock, batch, open_log, read_all

PREPARED = ("next.log.prepared", "next.index.prepared", "next.timeindex.prepared")


class Asks:
    """Collects the logs' requests for roll work, as the log manager does."""

    def __init__(self, log: PartitionLog) -> None:
        self.log = log
        self.count = 0
        log.on_roll_work = self

    def __call__(self, log: PartitionLog) -> None:
        assert log is self.log
        self.count += 1

    def run(self) -> RollWork:
        work = self.log.begin_roll_work()
        assert work is not None
        run_chore(work)
        return work


def prepared(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob("*.prepared"))


def offsets(log: PartitionLog) -> list[int]:
    return [r.offset for r in read_all(log)]


def test_a_roll_adopts_the_prepared_files(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=1000, segment_index_bytes=800, index_interval_bytes=1)
    directory = tmp_path / "t-0"
    log = open_log(directory, config)
    asks = Asks(log)
    while asks.count == 0:
        log.append_as_leader(batch(2, value_size=50), 0, T0)
    assert log.active_segment.size * 2 >= 1000 and len(log.segments) == 1
    log.append_as_leader(batch(1), 0, T0)
    assert asks.count == 1  # asked once
    work = log.begin_roll_work()
    assert work is not None and log.begin_roll_work() is None  # one at a time
    run_chore(work)
    assert prepared(directory) == sorted(PREPARED)
    assert os.path.getsize(directory / "next.index.prepared") == 800
    assert os.path.getsize(directory / "next.timeindex.prepared") == 792
    assert log.begin_roll_work() is None  # ready: nothing more to make
    end = log.log_end_offset
    while len(log.segments) == 1:
        info = log.append_as_leader(batch(2, value_size=50), 0, T0)
    new = log.active_segment
    assert new.base_offset == info.first_offset >= end  # the append that rolled is in it
    assert (log.rolls_prepared, log.rolls_inline) == (1, 0)
    assert prepared(directory) == []
    assert os.path.getsize(new.offset_index.path) == 800  # as a created active segment's
    assert os.path.getsize(new.time_index.path) == 792
    assert os.path.getsize(new.log.path) == new.size
    # The old segment's indexes hold their entries, then zeros until the roll work cuts them.
    assert os.path.getsize(log.segments[0].offset_index.path) == 800
    # The roll asked for the segment after it at once; not made, the next roll creates it.
    while len(log.segments) == 2:
        log.append_as_leader(batch(2, value_size=50), 0, T0)
    assert asks.count == 2 and (log.rolls_prepared, log.rolls_inline) == (1, 1)
    asks.run()  # both rolled segments' indexes cut to their entries
    for old in log.segments[:2]:
        assert os.path.getsize(old.offset_index.path) == old.offset_index.entries * 8
        assert os.path.getsize(old.time_index.path) == old.time_index.entries * 12
    expected = list(range(log.log_end_offset))
    assert offsets(log) == expected
    log.close()
    log = open_log(directory, config, had_clean_shutdown=True)
    assert offsets(log) == expected and len(log.segments) == 3
    log.close()


def test_a_crash_with_a_prepared_segment_recovers_without_it(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=1000, index_interval_bytes=1, preallocate=True)
    directory = tmp_path / "t-0"
    log = open_log(directory, config)
    asks = Asks(log)
    while asks.count == 0:
        log.append_as_leader(batch(2, value_size=50), 0, T0)
    asks.run()
    assert os.path.getsize(directory / "next.log.prepared") == 1000  # preallocated
    end = log.log_end_offset
    log.abandon()  # a crash with the prepared files on disk
    log = open_log(directory, config)
    assert prepared(directory) == [] and len(log.segments) == 1
    assert offsets(log) == list(range(end))
    asks = Asks(log)
    # A crash half way through an adoption: the new .log renamed, its indexes not yet.
    while asks.count == 0:
        log.append_as_leader(batch(2, value_size=50), 0, T0)
    asks.run()
    end = log.log_end_offset
    log.abandon()
    os.rename(directory / "next.log.prepared", directory / f"{end:020d}.log")
    log = open_log(directory, config)
    assert prepared(directory) == [] and [s.base_offset for s in log.segments] == [0, end]
    assert log.log_end_offset == end and offsets(log) == list(range(end))
    log.append_as_leader(batch(1), 0, T0)
    assert offsets(log) == list(range(end + 1))
    log.close()


def test_time_and_index_full_rolls_adopt_too(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "t-0", LogConfig(segment_ms=1000), clock)
    asks = Asks(log)
    log.append_as_leader(batch(1, ts=T0), 0, clock())
    assert asks.count == 0
    log.append_as_leader(batch(1, ts=T0 + 501), 0, clock())  # half of segment.ms
    assert asks.count == 1
    asks.run()
    log.append_as_leader(batch(1, ts=T0 + 1001), 0, clock())
    assert [s.base_offset for s in log.segments] == [0, 2] and log.rolls_prepared == 1
    log.close()
    # index.interval.bytes 0: every batch after the first is indexed; 4 entries fill it
    log = open_log(tmp_path / "u-0", LogConfig(segment_index_bytes=32, index_interval_bytes=0))
    asks = Asks(log)
    for i in range(12):
        log.append_as_leader(batch(1, tag=i), 0, T0)
        work = log.begin_roll_work()
        if work is not None:
            run_chore(work)
    assert log.rolls_prepared >= 2 and log.rolls_inline == 0
    assert offsets(log) == list(range(12))
    log.close()


def test_prepared_files_of_other_sizes_are_not_adopted(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=1000, index_interval_bytes=1)
    log = open_log(tmp_path / "t-0", config)
    asks = Asks(log)
    while asks.count == 0:
        log.append_as_leader(batch(2, value_size=50), 0, T0)
    asks.run()
    log.update_config(config.replace(segment_index_bytes=4096))
    while len(log.segments) == 1:
        log.append_as_leader(batch(2, value_size=50), 0, T0)
    assert (log.rolls_prepared, log.rolls_inline) == (0, 1)
    assert os.path.getsize(log.active_segment.offset_index.path) == 4096
    log.close()


def test_a_full_disk_while_preparing_leaves_the_roll_to_create_the_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, LogConfig(segment_bytes=1000, index_interval_bytes=1))
    asks = Asks(log)
    while asks.count == 0:
        log.append_as_leader(batch(2, value_size=50), 0, T0)
    real_open = os.open

    def full(path: str | os.PathLike[str], flags: int, *args: int) -> int:
        if flags & os.O_CREAT:  # no file can be made
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", full)
    work = asks.run()
    assert isinstance(work.error, OSError) and work.error.errno == errno.ENOSPC
    end = log.log_end_offset
    # Not asked again at every append; the roll creates the files, and fails cleanly.
    with pytest.raises(KafkaStorageError):
        while True:
            log.append_as_leader(batch(2, value_size=50), 0, T0)
    assert asks.count == 1 and len(log.segments) == 1 and log.active_segment.active
    assert log.log_end_offset >= end
    acknowledged = log.log_end_offset
    monkeypatch.setattr(os, "open", real_open)
    info = log.append_as_leader(batch(2, value_size=50), 0, T0)
    assert info.first_offset == acknowledged and len(log.segments) == 2
    assert (log.rolls_prepared, log.rolls_inline) == (0, 1)
    assert offsets(log) == list(range(acknowledged + 2))
    log.close()


def test_retention_truncation_and_compaction_over_adopted_segments(tmp_path: Path) -> None:
    clock = Clock()
    manager = LogManager([tmp_path], LogConfig(), now_ms=clock)
    manager.open()
    asked: list[int] = []
    manager.on_roll_work = lambda: asked.append(1)
    config = LogConfig(
        segment_bytes=600,
        index_interval_bytes=1,
        cleanup_policy=("compact", "delete"),
        min_cleanable_dirty_ratio=0.01,
        file_delete_delay_ms=0,
    )
    log = manager.get_or_create("t", 0, config)

    def append(i: int) -> None:
        log.append_as_leader(batch(2, value_size=60, key=b"k%d" % (i % 3)), 0, T0)
        work = manager.begin_roll_work()
        if work is not None:
            run_chore(work)

    for i in range(30):
        append(i)
    assert asked and log.rolls_prepared >= 5 and log.rolls_inline <= 1
    log.update_high_watermark(log.log_end_offset)
    end = log.log_end_offset
    assert log.compact(clock(), force=True) > 0
    assert log.delete_records_before(10) == 10
    assert [r.offset for r in read_all(log)][0] >= 10
    assert log.truncate_to(end - 10)
    for i in range(5):
        append(i)
    assert log.log_end_offset == end - 10 + 10
    log.update_config(log.config.replace(retention_bytes=1))
    assert log.apply_retention(clock()) > 0
    log.append_as_leader(batch(1), 0, T0)
    manager.close()
    manager = LogManager([tmp_path], LogConfig(), now_ms=clock)
    manager.open()
    reopened = manager.get("t", 0)
    assert reopened is not None and reopened.log_end_offset == end + 1
    assert prepared(tmp_path / "t-0") == []
    manager.close()


def _pbatch(seq: int) -> bytearray:
    record = SimpleRecord(None, b"v%d" % seq + b"x" * 60, (), T0)
    return bytearray(
        build_record_batch([record], producer_id=7, producer_epoch=0, base_sequence=seq)
    )


def test_the_roll_s_producer_snapshot_is_written_by_the_chore(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    config = LogConfig(segment_bytes=400)
    log = open_log(directory, config)
    asks = Asks(log)
    seq = 0
    while len(log.segments) == 1:
        log.append_as_leader(_pbatch(seq), 0, T0)
        seq += 1
    roll = log.active_segment.base_offset
    assert snapshot_offsets(directory) == []  # not written on the log's thread
    work = log.begin_roll_work()
    assert work is not None and [snapshot[0] for snapshot in work.snapshots] == [roll]
    work.prepare()
    assert snapshot_offsets(directory) == [] and (directory / f"{roll:020d}.snapshot.tmp").exists()
    work.commit()
    assert snapshot_offsets(directory) == [roll]
    assert log.producer_state.last_snapshot_offset == roll and asks.count >= 1
    log.abandon()  # a crash: the state below `roll` comes from the snapshot
    log = open_log(directory, config)
    assert log.append_as_leader(_pbatch(seq - 1), 0, T0).duplicate
    assert log.append_as_leader(_pbatch(seq), 0, T0).first_offset == seq
    log.close()


def test_a_truncation_voids_a_snapshot_written_meanwhile(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    clock = Clock()
    log = open_log(directory, LogConfig(segment_bytes=400, file_delete_delay_ms=0), clock)
    Asks(log)
    seq = 0
    while len(log.segments) == 1:
        log.append_as_leader(_pbatch(seq), 0, T0)
        seq += 1
    roll = log.active_segment.base_offset
    work = log.begin_roll_work()
    assert work is not None
    work.prepare()  # in the worker thread...
    assert log.truncate_to(roll - 1)  # ...while a follower truncates below the roll
    work.commit()
    assert snapshot_offsets(directory) == []
    tmp = directory / f"{roll:020d}.snapshot.tmp"
    assert tmp in log.take_deleted_files(clock())  # for the removal chore to unlink
    # The log grows past `roll` again (offsets are sequences here): its state is the new one.
    while log.log_end_offset <= roll + 1:
        log.append_as_leader(_pbatch(log.log_end_offset), 0, T0)
    end = log.log_end_offset
    log.close()
    log = open_log(directory, LogConfig(segment_bytes=400), clock, had_clean_shutdown=True)
    assert log.append_as_leader(_pbatch(end - 1), 0, T0).duplicate
    assert log.append_as_leader(_pbatch(end), 0, T0).first_offset == end
    log.close()


def test_every_roll_s_snapshot_is_written_when_rolls_outrun_the_chore(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(directory, LogConfig(segment_bytes=400))
    Asks(log)
    seq = 0
    while len(log.segments) < 4:  # three rolls before any roll work runs
        log.append_as_leader(_pbatch(seq), 0, T0)
        seq += 1
    rolls = [s.base_offset for s in log.segments[1:]]
    work = log.begin_roll_work()
    assert work is not None and [snapshot[0] for snapshot in work.snapshots] == rolls
    run_chore(work)
    assert snapshot_offsets(directory) == rolls
    assert log.producer_state.last_snapshot_offset == rolls[-1]
    log.close()
