"""Storage faults: a full disk (ENOSPC) and failing fsyncs (EIO), injected per file.

Every failed operation must leave the log as it was (no half-written batch, no index entry, no
advanced log end offset), raise :class:`KafkaStorageError` rather than a bare ``OSError``, and
work again once the fault clears, writing each retried record exactly once. The log manager's
chores and shutdown must survive the same faults, and never leave a clean-shutdown marker over
data that may not have reached the disk.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.records import SimpleRecord, build_record_batch
from storage.chore import run_chore
from storage.config import LogConfig
from storage.errors import KafkaStorageError, StorageError
from storage.log_manager import LogManager
from storage.partition_log import PartitionLog

from .helpers import T0, Clock, batch, read_all


class Faults:
    """Makes ``os.fsync``, ``os.pwrite`` or ``os.write`` fail for files whose name ends with a
    given suffix, until :meth:`clear`. A pwrite fault first writes half of what it was given
    (a partial write, as a disk filling up mid-call gives)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rules: dict[str, tuple[str, int]] = {}
        self.hits = 0
        real_fsync, real_pwrite, real_write = os.fsync, os.pwrite, os.write

        def hit(op: str, fd: int) -> int | None:
            rule = self.rules.get(op)
            if rule is None or not os.readlink(f"/proc/self/fd/{fd}").endswith(rule[0]):
                return None
            self.hits += 1
            return rule[1]

        def fsync(fd: int) -> None:
            code = hit("fsync", fd)
            if code is not None:
                raise OSError(code, os.strerror(code))
            real_fsync(fd)

        def pwrite(fd: int, data: bytes, offset: int) -> int:
            code = hit("pwrite", fd)
            if code is None:
                return real_pwrite(fd, data, offset)
            if len(data) > 1 and self.hits == 1:
                return real_pwrite(fd, memoryview(data)[: len(data) // 2], offset)
            raise OSError(code, os.strerror(code))

        def write(fd: int, data: bytes) -> int:
            code = hit("write", fd)
            if code is not None:
                raise OSError(code, os.strerror(code))
            return real_write(fd, data)

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "pwrite", pwrite)
        monkeypatch.setattr(os, "write", write)

    def fail(self, op: str, suffix: str, code: int) -> None:
        self.rules[op] = (suffix, code)
        self.hits = 0

    def clear(self) -> None:
        self.rules.clear()


@pytest.fixture
def faults(monkeypatch: pytest.MonkeyPatch) -> Faults:
    return Faults(monkeypatch)


@pytest.fixture
def plog(tmp_path: Path) -> Iterator[PartitionLog]:
    lg = PartitionLog.open(tmp_path / "t-0", LogConfig(), now_ms=Clock())
    yield lg
    lg.close()


def offsets(lg: PartitionLog) -> list[int]:
    return [r.offset for r in read_all(lg)]


def test_a_failed_fsync_takes_the_append_back(plog: PartitionLog, faults: Faults) -> None:
    plog.append_as_leader(batch(2), 0, T0)
    size = plog.active_segment.size
    faults.fail("fsync", ".log", errno.EIO)
    with pytest.raises(KafkaStorageError):
        plog.append_as_leader(batch(3), 0, T0, sync=True)
    assert faults.hits
    assert (plog.log_end_offset, plog.active_segment.size, plog.recovery_point) == (2, size, 0)
    assert offsets(plog) == [0, 1]
    faults.clear()
    info = plog.append_as_leader(batch(3), 0, T0, sync=True)  # the producer's retry
    assert info.first_offset == 2
    assert (plog.log_end_offset, plog.recovery_point) == (5, 5)
    assert offsets(plog) == [0, 1, 2, 3, 4]  # written once


def test_an_idempotent_retry_after_a_failed_fsync_is_written_not_deduplicated(
    plog: PartitionLog, faults: Faults
) -> None:
    """The failed batch is forgotten with the append, so the retry is not answered as a
    duplicate of records that were never made durable: it is written (and fsynced) once."""

    def idempotent(seq: int) -> bytearray:
        records = [SimpleRecord(b"k", b"v%d" % seq, (), T0)]
        return bytearray(
            build_record_batch(records, producer_id=7, producer_epoch=0, base_sequence=seq)
        )

    plog.append_as_leader(idempotent(0), 0, T0, sync=True)
    faults.fail("fsync", ".log", errno.EIO)
    with pytest.raises(KafkaStorageError):
        plog.append_as_leader(idempotent(1), 0, T0, sync=True)
    faults.clear()
    info = plog.append_as_leader(idempotent(1), 0, T0, sync=True)
    assert not info.duplicate and info.first_offset == 1
    assert (plog.log_end_offset, plog.recovery_point) == (2, 2)
    assert plog.append_as_leader(idempotent(1), 0, T0).duplicate  # a later retry is one


def test_a_follower_append_whose_fsync_fails_is_fetched_again(
    plog: PartitionLog, faults: Faults, tmp_path: Path
) -> None:
    leader = PartitionLog.open(tmp_path / "leader" / "t-0", LogConfig())
    leader.append_as_leader(batch(2), 3, T0)
    with leader.read(0, 1 << 20) as r:
        data = b"".join(os.pread(s.fd, s.length, s.position) for s in r.slices)
    leader.close()
    faults.fail("fsync", ".log", errno.EIO)
    with pytest.raises(KafkaStorageError):
        plog.append_as_follower(data, sync=True)
    assert plog.log_end_offset == 0 and plog.leader_epoch_cache.latest_epoch is None
    faults.clear()
    plog.append_as_follower(data, sync=True)
    assert offsets(plog) == [0, 1] and plog.leader_epoch_cache.latest_epoch == 3


def test_a_partial_write_on_a_full_disk_is_cut_back(tmp_path: Path, faults: Faults) -> None:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(index_interval_bytes=1))
    plog.append_as_leader(batch(2), 0, T0)
    plog.append_as_leader(batch(2), 0, T0)
    seg = plog.active_segment
    size, entries = seg.size, seg.offset_index.entries
    faults.fail("pwrite", ".log", errno.ENOSPC)
    with pytest.raises(KafkaStorageError):
        plog.append_as_leader(batch(5, value_size=4000), 0, T0)
    assert faults.hits == 2  # half written, then the disk was full
    assert (plog.log_end_offset, seg.size, os.path.getsize(seg.log.path)) == (4, size, size)
    assert seg.offset_index.entries == entries
    faults.clear()
    plog.append_as_leader(batch(1), 0, T0)
    assert offsets(plog) == [0, 1, 2, 3, 4]
    plog.close()


def test_a_roll_on_a_full_disk_keeps_the_old_segment_active(tmp_path: Path, faults: Faults) -> None:
    config = LogConfig(segment_bytes=2000, index_interval_bytes=1)
    lg = PartitionLog.open(tmp_path / "t-0", config, now_ms=Clock())
    try:
        while len(lg.segments) == 1 and lg.active_segment.size < 1200:
            lg.append_as_leader(batch(2, value_size=100), 0, T0)
        # The disk is full: an append's index entries stay in memory (the append succeeds)...
        faults.fail("pwrite", ".index", errno.ENOSPC)
        lg.append_as_leader(batch(2, value_size=100), 0, T0)
        end, old = lg.log_end_offset, lg.active_segment
        # ...and rolling, which writes the old segment's pending entries, fails.
        with pytest.raises(KafkaStorageError):
            lg.append_as_leader(batch(2, value_size=400), 0, T0)
        assert faults.hits
        assert lg.segments == [old] and old.active and lg.log_end_offset == end
        faults.clear()
        lg.append_as_leader(batch(2, value_size=400), 0, T0)
        assert len(lg.segments) == 2 and not old.active
        assert offsets(lg) == list(range(end + 2))
        lg.close()
        lg = PartitionLog.open(tmp_path / "t-0", config, had_clean_shutdown=True)
        assert offsets(lg) == list(range(end + 2))
    finally:
        lg.close()


def test_a_leader_epoch_checkpoint_on_a_full_disk(
    plog: PartitionLog, faults: Faults, tmp_path: Path
) -> None:
    faults.fail("write", "leader-epoch-checkpoint.tmp", errno.ENOSPC)
    with pytest.raises(KafkaStorageError):
        plog.append_as_leader(batch(2), 7, T0, sync=True)
    assert plog.log_end_offset == 0 and plog.leader_epoch_cache.latest_epoch is None
    assert not (tmp_path / "t-0" / "leader-epoch-checkpoint.tmp").exists()
    faults.clear()
    plog.append_as_leader(batch(2), 7, T0, sync=True)
    assert (tmp_path / "t-0" / "leader-epoch-checkpoint").read_text() == "0\n1\n7 0\n"


def test_checkpoints_on_a_full_disk_are_retried(tmp_path: Path, faults: Faults) -> None:
    d = tmp_path / "logs"
    lm = LogManager([d], LogConfig(), now_ms=Clock())
    lm.open()
    lg = lm.get_or_create("t", 0)
    lg.append_as_leader(batch(2), 0, T0)
    lg.update_high_watermark(2)
    faults.fail("write", "replication-offset-checkpoint.tmp", errno.ENOSPC)
    assert lm.checkpoint() == {d}  # logged, not raised: the broker stays up
    assert not (d / "replication-offset-checkpoint").exists()
    assert not (d / "replication-offset-checkpoint.tmp").exists()
    faults.clear()
    assert lm.checkpoint() == set()
    assert (d / "replication-offset-checkpoint").read_text() == "0\n1\nt 0 2\n"
    lm.close()


def flush_due(lm: LogManager, now_ms: int) -> int:
    """The broker's flush job run inline: each due flush prepared and committed, a failure
    handed to the manager. Returns the number of flushes that succeeded."""
    flushed = 0
    for pending in lm.flushes(now_ms):
        try:
            run_chore(pending)
            flushed += 1
        except (OSError, StorageError) as e:
            lm.chore_failed("flush", pending.log, e)
    return flushed


def test_chores_survive_a_full_disk(tmp_path: Path, faults: Faults) -> None:
    d = tmp_path / "logs"
    clock = Clock()
    lm = LogManager([d], LogConfig(flush_ms=1000), now_ms=clock)
    lm.open()
    lg = lm.get_or_create("t", 0)
    lg.append_as_leader(batch(2), 0, T0)
    faults.fail("fsync", ".log", errno.ENOSPC)
    assert flush_due(lm, clock.advance(5000)) == 0
    assert lg.recovery_point == 0 and lg.log_end_offset == 2
    assert not lm.offline_dirs  # a full disk is waited out, not given up
    faults.clear()
    assert flush_due(lm, clock.now) == 1 and lg.recovery_point == 2
    lm.close()


def test_an_io_error_takes_its_log_directory_offline(tmp_path: Path, faults: Faults) -> None:
    """Kafka's LogDirFailureChannel: EIO in one log directory takes it offline (its logs
    answer KAFKA_STORAGE_ERROR, even for reads), the other goes on and takes new partitions,
    and shutdown leaves the failed one without its clean-shutdown marker."""
    a, b = tmp_path / "a", tmp_path / "b"
    clock = Clock()
    lm = LogManager([a, b], LogConfig(flush_ms=1000), now_ms=clock)
    lm.open()
    in_a, in_b = lm.get_or_create("t", 0), lm.get_or_create("t", 1)
    assert (lm.log_dir_of("t", 0), lm.log_dir_of("t", 1)) == (a, b)
    in_a.append_as_leader(batch(2), 0, T0)
    in_b.append_as_leader(batch(2), 0, T0)
    in_b.flush()
    faults.fail("fsync", ".log", errno.EIO)
    assert flush_due(lm, clock.advance(5000)) == 0  # a failed, b had nothing to flush
    faults.clear()
    assert lm.offline_dirs == {a} and in_a.offline
    for failing in (
        lambda: in_a.append_as_leader(batch(1), 0, T0),
        lambda: in_a.read(0, 1000),
    ):
        with pytest.raises(KafkaStorageError):
            failing()
    in_b.append_as_leader(batch(1), 0, T0)
    assert offsets(in_b) == [0, 1, 2]
    lm.get_or_create("u", 0)
    assert lm.log_dir_of("u", 0) == b
    assert flush_due(lm, clock.advance(5000)) == 1  # the offline log is left alone
    assert in_b.recovery_point == in_b.log_end_offset == 3
    lm.close()
    assert not (a / ".kafka_cleanshutdown").exists() and (b / ".kafka_cleanshutdown").exists()
    lm = LogManager([a, b], LogConfig())
    lm.open()
    restarted = lm.get("t", 0)
    assert restarted is not None and not lm.had_clean_shutdown[a]
    assert offsets(restarted) == [0, 1]
    lm.close()


def test_handle_log_error_ignores_a_full_disk(tmp_path: Path) -> None:
    lm = LogManager([tmp_path / "a"], LogConfig())
    lm.open()
    lm.get_or_create("t", 0)
    full = KafkaStorageError("append failed")
    full.__cause__ = OSError(errno.ENOSPC, "No space left on device")
    lm.handle_log_error("t", 0, full)
    assert not lm.offline_dirs
    lm.handle_log_error("t", 0, OSError(errno.EROFS, "Read-only file system"))
    assert lm.offline_dirs == {tmp_path / "a"}
    with pytest.raises(KafkaStorageError):
        lm.get_or_create("t", 1)  # no log directory left
    lm.close()


def test_no_clean_shutdown_marker_after_a_write_back_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import storage.log_manager

    def syncfs(fd: int) -> None:
        raise OSError(errno.EIO, "write-back failed")

    d = tmp_path / "logs"
    lm = LogManager([d], LogConfig())
    lm.open()
    lm.get_or_create("t", 0).append_as_leader(batch(3), 0, T0)
    monkeypatch.setattr(storage.log_manager, "syncfs", syncfs)
    lm.close()
    assert not (d / ".kafka_cleanshutdown").exists()
    assert (d / "recovery-point-offset-checkpoint").read_text() == "0\n1\nt 0 0\n"
    monkeypatch.undo()
    lm = LogManager([d], LogConfig())
    lm.open()
    lg = lm.get("t", 0)
    assert lg is not None and not lm.had_clean_shutdown[d]
    assert lg.recovery_stats["recovered_segments"] == 1 and offsets(lg) == [0, 1, 2]
    lm.close()
    assert (d / ".kafka_cleanshutdown").exists()


def test_no_partial_clean_shutdown_marker(tmp_path: Path, faults: Faults) -> None:
    d = tmp_path / "logs"
    lm = LogManager([d], LogConfig())
    lm.open()
    lm.get_or_create("t", 0).append_as_leader(batch(1), 0, T0)
    faults.fail("write", ".kafka_cleanshutdown", errno.ENOSPC)
    lm.close()  # does not raise
    assert faults.hits and not (d / ".kafka_cleanshutdown").exists()


def test_a_producer_snapshot_on_a_full_disk_does_not_fail_the_roll(
    tmp_path: Path, faults: Faults
) -> None:
    lg = PartitionLog.open(tmp_path / "t-0", LogConfig(), now_ms=Clock())
    try:
        lg.append_as_leader(batch(2), 0, T0)
        faults.fail("write", ".snapshot.tmp", errno.ENOSPC)
        lg.roll()  # a lost snapshot only costs a longer scan at the next open
        assert faults.hits and len(lg.segments) == 2
        assert not list((tmp_path / "t-0").glob("*.tmp"))
        faults.clear()
        lg.append_as_leader(batch(1), 0, T0)
    finally:
        lg.close()
    lg = PartitionLog.open(tmp_path / "t-0", LogConfig())
    assert offsets(lg) == [0, 1, 2]
    lg.close()


def test_a_failed_unlink_of_a_deleted_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The removal chore's unlink failing with EIO takes the log directory offline (Kafka's
    async delete does too) and leaves the ``.deleted`` files, which the next start removes."""
    clock = Clock()
    config = LogConfig(segment_bytes=len(batch(1)), retention_bytes=0, file_delete_delay_ms=0)
    lm = LogManager([tmp_path], config, now_ms=clock)
    lm.open()
    lg = lm.get_or_create("t", 0)
    for _ in range(3):
        lg.append_as_leader(batch(1), 0, T0)
    lg.update_high_watermark(3)
    assert lm.run_retention(clock()) == 3
    removal = lm.removal_chore(clock())
    assert removal is not None

    def unlink(path: str, *args: object, **kwargs: object) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    with monkeypatch.context() as m:
        m.setattr(os, "unlink", unlink)
        run_chore(removal)
    assert lm.offline_dirs == {tmp_path} and lg.offline
    assert list((tmp_path / "t-0").glob("*.log.deleted"))
    lm.close()
    lm = LogManager([tmp_path], config)
    lm.open()
    assert not list((tmp_path / "t-0").glob("*.deleted"))
    lm.close()
