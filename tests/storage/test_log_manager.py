"""LogManager: discovery, checkpoints in Kafka's formats, clean/unclean restarts, placement,
deletion, chores, and 10,000 partitions under a small descriptor budget."""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import uuid
from pathlib import Path

import pytest

from storage.chore import run_chore
from storage.config import LogConfig
from storage.log_manager import LogManager
from storage.partition_log import PartitionLog
from wirebroker.replication.partition_metadata import (
    read_topic_id,
    sync_new_topic_ids,
    write_new_topic_id,
)

from .helpers import T0, Clock, batch, open_fds, read_all

TOPIC_ID = uuid.UUID(int=7)


def test_open_close_checkpoints_and_clean_marker(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    lm = LogManager([d], LogConfig(), now_ms=Clock())
    lm.open()
    a: PartitionLog | None = lm.get_or_create("orders", 0)
    assert a is not None
    b = lm.get_or_create("orders", 1)
    for _ in range(3):
        a.append_as_leader(batch(2), 4, T0)
    b.append_as_leader(batch(1), 4, T0)
    a.update_high_watermark(4)
    a.delete_records_before(2)
    assert lm.get("orders", 0) is a and lm.get("nope", 0) is None
    assert lm.partitions() == [("orders", 0), ("orders", 1)]
    lm.close()
    assert (d / "recovery-point-offset-checkpoint").read_text() == "0\n2\norders 0 6\norders 1 1\n"
    assert (d / "replication-offset-checkpoint").read_text() == "0\n2\norders 0 4\norders 1 0\n"
    assert (d / "log-start-offset-checkpoint").read_text() == "0\n1\norders 0 2\n"
    assert (d / "orders-0" / "leader-epoch-checkpoint").read_text() == "0\n1\n4 2\n"
    assert json.loads((d / ".kafka_cleanshutdown").read_text())["version"] == 0

    lm = LogManager([d], LogConfig())
    lm.open()
    assert lm.had_clean_shutdown[d] and not (d / ".kafka_cleanshutdown").exists()
    a = lm.get("orders", 0)
    assert a is not None
    assert (a.log_start_offset, a.high_watermark, a.log_end_offset) == (2, 4, 6)
    assert a.recovery_stats["recovered_segments"] == 0
    assert [r.offset for r in read_all(a)] == [2, 3, 4, 5]
    # a crash now: no marker, recovery from the checkpointed recovery points
    a.append_as_leader(batch(2), 4, T0)
    lm.checkpoint()
    for _tp, lg in lm.logs():
        lg.abandon()
    lm = LogManager([d], LogConfig())
    lm.open()
    a = lm.get("orders", 0)
    assert a is not None and not lm.had_clean_shutdown[d]
    assert a.log_end_offset == 8 and a.recovery_point == 6
    assert a.recovery_stats["recovered_segments"] == 1
    lm.close()


def test_placement_deletion_and_foreign_dirs(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    lm = LogManager(dirs, LogConfig())
    lm.open()
    for p in range(4):
        lm.get_or_create("t", p)
    assert sorted(lm.log_dir_of("t", p) for p in range(4)) == sorted(dirs * 2)  # type: ignore[type-var]
    target = lm.log_dir_of("t", 2)
    assert target is not None
    assert lm.delete_partition("t", 2)
    assert not (target / "t-2").exists() and not lm.delete_partition("t", 2)
    (renamed,) = target.glob("t-2.*-delete")  # renamed now, removed by a chore off the loop
    removal = lm.removal_chore(T0)
    assert removal is not None and lm.removal_chore(T0) is None
    run_chore(removal)
    assert not renamed.exists()
    lm.close()
    (dirs[0] / "not-a-partition").mkdir()
    (dirs[0] / "x-0.0123456789abcdef0123456789abcdef-delete").mkdir()
    (dirs[0] / "y-3.0123456789abcdef0123456789abcdef-future").mkdir()
    lm = LogManager(dirs, LogConfig())
    lm.open()
    assert lm.partitions() == [("t", 0), ("t", 1), ("t", 3)]
    lm.close()  # removes what is left to remove
    assert not (dirs[0] / "x-0.0123456789abcdef0123456789abcdef-delete").exists()


def test_creation_as_a_chore_and_stray_directories(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    lm = LogManager(dirs, LogConfig())
    lm.open()
    made: list[tuple[tuple[str, int], Path]] = []
    creation = lm.begin_create(
        {("t", p): LogConfig() for p in range(4)}, lambda tp, d: made.append((tp, d))
    )
    assert lm.begin_create({("t", 0): LogConfig()}).pending == {}  # being created already
    (dirs[0] / "t-0").mkdir(parents=True)  # not the manager's: a leftover of a crash
    (dirs[0] / "t-0" / "00000000000000000000.log").write_bytes(b"old")
    assert len(lm) == 0
    run_chore(creation)
    assert creation.failed == {} and sorted(creation.created) == [("t", p) for p in range(4)]
    assert sorted(tp for tp, _d in made) == [("t", p) for p in range(4)]
    assert sorted(lm.log_dir_of("t", p) for p in range(4)) == sorted(dirs * 2)  # type: ignore[type-var]
    (stray,) = dirs[0].glob("t-0.*-stray")  # moved aside, kept, never reused
    assert (stray / "00000000000000000000.log").read_bytes() == b"old"
    t0 = lm.get("t", 0)
    assert t0 is not None and t0.log_end_offset == 0
    moved = lm.mark_stray("t", 1)
    assert moved is not None and moved.name.endswith("-stray") and lm.get("t", 1) is None
    lm.offline_dirs.update(dirs)
    offline = lm.begin_create({("u", 0): LogConfig()})
    assert list(offline.failed) == [("u", 0)] and offline.pending == {}
    lm.offline_dirs.clear()
    lm.close()
    lm = LogManager(dirs, LogConfig())
    lm.open()  # the strays stay aside
    assert lm.partitions() == [("t", 0), ("t", 2), ("t", 3)]
    assert len(list(tmp_path.glob("*/*-stray"))) == 2
    lm.close()


def test_a_creation_with_a_name_no_directory_can_have_begins_nothing(tmp_path: Path) -> None:
    # It raised after counting the partitions before it as being created: they never were.
    lm = LogManager([tmp_path], LogConfig())
    lm.open()
    for bad in [("", 0), ("t\n", 0), ("t", -1)]:
        with pytest.raises(ValueError, match="invalid"):
            lm.begin_create({("t", 0): LogConfig(), bad: LogConfig()})
    creation = lm.begin_create({("t", 0): LogConfig()})
    run_chore(creation)
    assert list(creation.created) == [("t", 0)]
    lm.close()


def test_a_new_log_is_made_with_only_its_files_and_no_clock_read(tmp_path: Path) -> None:
    """A created log holds only its first segment's files (and what `init` wrote), reads the
    clock only when the creation is begun (its prepare may run off the loop), works and
    reopens; a log whose making fails leaves no directory behind (a later creation makes it
    afresh, not as stray)."""
    reads: list[int] = []
    lm = LogManager([tmp_path], LogConfig(), now_ms=lambda: reads.append(T0) or T0)
    lm.open()

    def init(tp: tuple[str, int], directory: Path) -> None:
        if tp == ("t", 1):
            raise OSError(28, "No space left on device")
        write_new_topic_id(directory, TOPIC_ID)

    creation = lm.begin_create({("t", 0): LogConfig(), ("t", 1): LogConfig()}, init)
    clock_reads = len(reads)
    creation.prepare()
    assert len(reads) == clock_reads  # none in the worker thread's part
    creation.commit()
    assert list(creation.failed) == [("t", 1)] and not (tmp_path / "t-1").exists()
    assert sorted(os.listdir(tmp_path / "t-0")) == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
        "partition.metadata",
    ]
    assert read_topic_id(tmp_path / "t-0") == TOPIC_ID
    assert sync_new_topic_ids([tmp_path / "t-0", tmp_path / "t-1"]) == {}  # t-1: none to sync
    t0 = lm.get("t", 0)
    assert t0 is not None and t0.log_end_offset == 0 and t0.segments[0].created_ms == T0
    t0.append_as_leader(batch(3), 4, T0)
    assert lm.get_or_create("t", 1).log_end_offset == 0  # tried again: made afresh
    assert not list(tmp_path.glob("*-stray"))
    lm.close()
    lm = LogManager([tmp_path], LogConfig())
    lm.open()
    reopened = lm.get("t", 0)
    assert reopened is not None and [r.offset for r in read_all(reopened)] == [0, 1, 2]
    lm.close()


def test_chores(tmp_path: Path) -> None:
    clock = Clock()
    config = LogConfig(segment_bytes=300, retention_ms=1000, file_delete_delay_ms=10)
    lm = LogManager([tmp_path], config, now_ms=clock)
    lm.open()
    lg: PartitionLog | None = lm.get_or_create("t", 0)
    assert lg is not None
    for _ in range(10):
        lg.append_as_leader(batch(2, ts=T0), 0, T0)
    lg.update_high_watermark(lg.log_end_offset)
    (pending,) = lm.flushes(clock())  # rolled segments get flushed
    pending.prepare()
    assert lg.recovery_point == 0  # until the chore commits
    pending.commit()
    assert lg.recovery_point == lg.active_segment.base_offset
    deleted = lm.run_retention(T0 + 5000)
    assert deleted > 0 and not list((tmp_path / "t-0").glob("*.deleted"))
    renames = lm.removal_chore(T0 + 5009)  # the renames to .deleted, off the loop
    assert renames is not None and not renames.files  # file.delete.delay.ms has not passed
    run_chore(renames)
    assert lm.removal_chore(T0 + 5009) is None
    removal = lm.removal_chore(T0 + 5010)
    assert removal is not None and list((tmp_path / "t-0").glob("*.deleted"))
    run_chore(removal)  # the unlinks: the broker runs them in a worker thread
    assert not list((tmp_path / "t-0").glob("*.deleted"))
    compacted = lm.get_or_create("c", 0, LogConfig(cleanup_policy=("compact",), segment_bytes=300))
    for _ in range(10):
        compacted.append_as_leader(batch(2), 0, T0)
    compacted.update_high_watermark(compacted.log_end_offset)
    (compaction,) = lm.compactions(T0)
    run_chore(compaction)
    assert compaction.removed > 0
    lm.close()
    assert (tmp_path / "cleaner-offset-checkpoint").read_text().startswith("0\n1\nc 0 ")


def test_ten_thousand_partitions_with_bounded_descriptors(tmp_path: Path) -> None:
    baseline = open_fds()
    lm = LogManager([tmp_path], LogConfig(), max_open_files=64)
    lm.open()
    peak = 0
    payload = batch(1)
    for p in range(10_000):
        lg = lm.get_or_create("many", p)
        lg.append_as_leader(payload, 0, T0)
        if p % 500 == 0:
            peak = max(peak, open_fds() - baseline)
    peak = max(peak, open_fds() - baseline)
    assert peak <= 64 + 4
    assert lm.handles.statistics()["open"] <= 64
    lm.close()
    assert open_fds() - baseline <= 2

    lm = LogManager([tmp_path], LogConfig(), max_open_files=64)
    lm.open()
    assert len(lm) == 10_000
    for p in range(0, 10_000, 7):
        found = lm.get("many", p)
        assert found is not None and found.log_end_offset == 1
        with found.read(0, 1000) as r:
            assert r.size == len(payload)
    assert open_fds() - baseline <= 64 + 4
    lm.close()


def test_sendfile_from_a_pinned_slice_while_the_pool_churns(tmp_path: Path) -> None:
    lm = LogManager([tmp_path], LogConfig(), max_open_files=2)
    lm.open()
    src = lm.get_or_create("big", 0)
    for i in range(40):
        src.append_as_leader(batch(50, value_size=1000, tag=i), 0, T0)
    result = src.read(0, 10 << 20)
    expected = result.read()
    a, b = socket.socketpair()
    a.setblocking(False)
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    received = bytearray()
    try:
        for s in result.slices:
            sent = 0
            while sent < s.length:
                # other partitions use the pool meanwhile: only the pinned fd survives
                other = lm.get_or_create("other", sent % 5)
                other.append_as_leader(batch(1), 0, T0)
                select.select([], [a], [], 1)
                with contextlib.suppress(BlockingIOError):
                    sent += os.sendfile(a.fileno(), s.fd, s.position + sent, s.length - sent)
                while True:
                    try:
                        chunk = b.recv(1 << 20, socket.MSG_DONTWAIT)
                    except BlockingIOError:
                        break
                    received += chunk
        while len(received) < len(expected):
            received += b.recv(1 << 20)
    finally:
        result.release()
        a.close()
        b.close()
    assert bytes(received) == expected
    assert lm.handles.statistics()["open"] <= 2
    lm.close()
