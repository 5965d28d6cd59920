"""Moving a partition's log to another log directory (storage.log_move, LogManager's moves):
the future log, its copy by follower appends, the swap, and what a restart finds."""

from __future__ import annotations

import re
from pathlib import Path

from protocol.record_batch import SimpleRecord
from protocol.records import build_record_batch
from storage.checkpoints import OffsetCheckpointFile
from storage.chore import run_chore
from storage.config import LogConfig
from storage.layout import RECOVERY_POINT_CHECKPOINT
from storage.log_manager import LogManager
from storage.log_move import LogMove
from storage.partition_log import PartitionLog

from .helpers import T0, Clock, batches_of, read_all
from .test_compaction import COMPACT
from .test_transactions import end_txn, produce, txn_batch

SMALL = LogConfig(segment_bytes=600)


def idempotent(pid: int, seq: int, n: int = 2) -> bytearray:
    return txn_batch(pid, seq, n, transactional=False, tag=b"i")


def copy(
    manager: LogManager, move: LogMove, max_bytes: int = 1 << 20, rounds: int | None = None
) -> None:
    """What the broker's move task does, on this thread: up to `rounds` copy steps (or until
    caught up), each with the roll work it asked for."""
    future = move.future
    assert future is not None
    while not move.caught_up and rounds != 0:
        result = move.next_read(max_bytes)
        assert result is not None
        with result:
            data = result.read()
        future.append_as_follower(data)
        if (work := manager.begin_roll_work()) is not None:
            run_chore(work)
        rounds = None if rounds is None else rounds - 1


def opened(tmp_path: Path, config: LogConfig = SMALL) -> tuple[list[Path], LogManager]:
    """Two log dirs and an open manager of them."""
    dirs = [tmp_path / "a", tmp_path / "b"]
    manager = LogManager(dirs, config, now_ms=Clock())
    manager.on_roll_work = lambda: None  # the roll work is run by `copy`
    manager.open()
    return dirs, manager


def start(manager: LogManager, tp: tuple[str, int], dest: Path) -> LogMove:
    move = manager.begin_move(*tp, dest)
    assert manager.future_made(move, move.make_future(manager.handles, Clock(), T0))
    return move


def test_a_move_keeps_records_offsets_producers_transactions_and_epochs(tmp_path: Path) -> None:
    dirs, manager = opened(tmp_path)
    log = manager.get_or_create("t", 0)
    assert manager.log_dir_of("t", 0) == dirs[0]
    (log.dir / "partition.metadata").write_text("version: 0\ntopic_id: x\n")
    seq = 0
    for _ in range(6):  # several segments
        produce(log, idempotent(7, seq))
        seq += 2
    produce(log, txn_batch(9, 0, 2))
    end_txn(log, 9, False)  # aborted: in the transaction index
    log.leader_epoch_cache.assign(3, log.log_end_offset)  # a new leader, no batch yet
    log.append_as_leader(idempotent(7, seq), 3, T0)
    seq += 2
    log.update_high_watermark(log.log_end_offset)
    log.delete_records_before(3)

    move = start(manager, ("t", 0), dirs[1])
    future = move.future
    assert future is not None
    assert re.fullmatch(r"t-0\.[0-9a-f]{32}-future", future.dir.name)
    assert future.dir.parent == dirs[1]
    assert (future.dir / "partition.metadata").read_text().endswith("topic_id: x\n")
    copy(manager, move, max_bytes=100, rounds=2)
    assert 0 < move.offset_lag < log.log_end_offset and move.size_in_bytes > 0
    assert manager.replace_current_with_future(move) is None  # not caught up
    assert list(manager.log_compactions(log, T0)) == []  # the cleaner is paused
    # The partition keeps taking appends while it is copied.
    log.append_as_leader(idempotent(7, seq), 3, T0)
    seq += 2
    log.update_high_watermark(log.log_end_offset)
    copy(manager, move)
    expected = read_all(log)
    aborted = log.aborted_transactions(0, log.log_end_offset)
    hw, start_offset, epochs = (
        log.high_watermark,
        log.log_start_offset,
        log.leader_epoch_cache.entries,
    )
    old_dir = log.dir

    new = manager.replace_current_with_future(move)
    assert new is future and manager.get("t", 0) is new and log.closed
    assert new.dir == dirs[1] / "t-0" and manager.log_dir_of("t", 0) == dirs[1]
    assert not old_dir.exists() and list(dirs[0].glob("t-0.*-delete"))
    assert manager.moves == {}
    assert read_all(new) == expected and len(new.segments) > 1  # the copy rolled
    assert (new.high_watermark, new.log_start_offset) == (hw, start_offset)
    assert new.leader_epoch_cache.entries == epochs
    assert new.aborted_transactions(0, new.log_end_offset) == aborted
    # The idempotent producer goes on: a retry is a duplicate, the next batch is taken.
    retried = new.append_as_leader(idempotent(7, seq - 2), 3, T0)
    assert retried.duplicate
    info = new.append_as_leader(idempotent(7, seq), 3, T0)
    assert not info.duplicate and info.first_offset == expected[-1].offset + 1
    new.update_high_watermark(new.log_end_offset)
    expected = read_all(new)
    removal = manager.removal_chore(T0)
    assert removal is not None
    run_chore(removal)
    assert list(dirs[0].iterdir()) == [] or not list(dirs[0].glob("t-0*"))
    manager.close()

    again = LogManager(dirs, SMALL, now_ms=Clock())
    again.open()
    reopened = again.get("t", 0)
    assert reopened is not None and again.log_dir_of("t", 0) == dirs[1]
    assert read_all(reopened) == expected
    assert reopened.log_start_offset == start_offset
    again.close()


def test_a_compacted_log_moves_with_its_gaps(tmp_path: Path) -> None:
    dirs, manager = opened(tmp_path, COMPACT.replace(segment_bytes=300))
    log = manager.get_or_create("c", 0)
    for i in range(40):
        records = [SimpleRecord(b"k%d" % (i % 3), b"v%d" % i, (), T0)]
        log.append_as_leader(bytearray(build_record_batch(records)), 0, T0)
    log.update_high_watermark(log.log_end_offset)
    log.compact(T0 + 10**9, force=True)
    batches = batches_of(log)
    assert len(batches) < 40  # gaps
    move = start(manager, ("c", 0), dirs[1])
    copy(manager, move, max_bytes=64)
    new = manager.replace_current_with_future(move)
    assert new is not None and batches_of(new) == batches
    assert new.log_end_offset == 40
    manager.close()


def copied(tmp_path: Path, batches: int) -> tuple[list[Path], LogManager, PartitionLog, LogMove]:
    """Two log dirs, t-0 of `batches` idempotent batches in the first, moving to the second
    and wholly copied."""
    dirs, manager = opened(tmp_path)
    log = manager.get_or_create("t", 0)
    for seq in range(0, 2 * batches, 2):
        produce(log, idempotent(1, seq))
    move = start(manager, ("t", 0), dirs[1])
    copy(manager, move)
    return dirs, manager, log, move


def test_a_dropped_move_is_removed_and_an_interrupted_one_resumed(tmp_path: Path) -> None:
    dirs, manager, log, move = copied(tmp_path, 6)
    manager.drop_move(move)
    assert move.cancelled and manager.moves == {} and manager.get("t", 0) is log
    assert manager.replace_current_with_future(move) is None
    move = start(manager, ("t", 0), dirs[1])
    copy(manager, move, max_bytes=100, rounds=2)
    done = move.future.log_end_offset if move.future else 0
    assert 0 < done < log.log_end_offset
    expected = read_all(log)
    manager.close()  # a stop in the middle of a move: the copy is kept, closed cleanly
    assert len(list(dirs[1].glob("t-0.*-future"))) == 1

    _, again = opened(tmp_path)
    assert again.partitions() == [("t", 0)] and again.log_dir_of("t", 0) == dirs[0]
    resumed = again.moves[("t", 0)]
    assert resumed.future is not None and resumed.future.log_end_offset == done
    copy(again, resumed)
    new = again.replace_current_with_future(resumed)
    assert new is not None and new.dir == dirs[1] / "t-0" and read_all(new) == expected
    again.close()


def test_the_roll_work_a_resumed_copy_asks_for_before_the_broker_takes_asks_is_kept(
    tmp_path: Path,
) -> None:
    dirs, manager = opened(tmp_path)
    log = manager.get_or_create("t", 0)
    for seq in range(0, 40, 2):  # some segments' worth
        produce(log, idempotent(1, seq))
    move = start(manager, ("t", 0), dirs[1])
    copy(manager, move, max_bytes=100, rounds=1)
    expected = read_all(log)
    manager.close()
    again = LogManager(dirs, SMALL, now_ms=Clock())  # no `on_roll_work` yet: a start-up
    again.open()
    resumed = again.moves[("t", 0)]
    future = resumed.future
    assert future is not None and len(future.segments) == 1
    while not resumed.caught_up:  # the resumed copy, before the broker takes asks
        with resumed.next_read(100) as result:  # type: ignore[union-attr]
            future.append_as_follower(result.read())
    assert len(future.segments) > 1  # it rolled, asking for its roll work
    assert again.replace_current_with_future(resumed) is None  # that work to do first
    again.on_roll_work = lambda: None
    work = again.begin_roll_work()  # the ask was kept for it
    assert work is not None
    run_chore(work)
    new = again.replace_current_with_future(resumed)
    assert new is not None and new.dir == dirs[1] / "t-0" and read_all(new) == expected
    again.close()


def test_an_interrupted_move_whose_log_ends_below_its_copy_begins_again(tmp_path: Path) -> None:
    dirs, manager, log, _move = copied(tmp_path, 4)
    log.truncate_to(4)  # as a crash's recovery may cut the tail the copy holds
    manager.close()
    _, again = opened(tmp_path)
    (stale,) = dirs[1].glob("t-0.*-future")
    resumed = again.moves[("t", 0)]
    assert resumed.future is None and not resumed.restart_needed()  # a new copy is to be made
    removal = again.removal_chore(T0)
    assert removal is not None
    run_chore(removal)
    assert not stale.exists()
    again.close()

    leftover = dirs[1] / "u-0.0123456789abcdef0123456789abcdef-future"  # no log u-0
    leftover.mkdir()
    _, again = opened(tmp_path)
    assert again.moves == {} and again.partitions() == [("t", 0)]
    removal = again.removal_chore(T0)
    assert removal is not None
    run_chore(removal)
    assert not leftover.exists()
    again.close()


def test_a_truncation_of_the_current_log_voids_the_copy(tmp_path: Path) -> None:
    dirs, manager, log, move = copied(tmp_path, 4)
    log.truncate_to(4)
    assert move.restart_needed()
    assert manager.replace_current_with_future(move) is None
    move = start(manager, ("t", 0), dirs[1])  # the broker's move task begins it again
    expected = read_all(log)
    copy(manager, move)
    new = manager.replace_current_with_future(move)
    assert new is not None and read_all(new) == expected
    assert new.log_end_offset == 4
    manager.close()


def test_a_preferred_directory_places_a_new_log(tmp_path: Path) -> None:
    dirs, manager = opened(tmp_path)
    manager.preferred_dirs[("p", 0)] = dirs[1]
    manager.get_or_create("p", 0)
    manager.get_or_create("p", 1)
    assert manager.log_dir_of("p", 0) == dirs[1] and manager.log_dir_of("p", 1) == dirs[0]
    assert manager.preferred_dirs == {}
    manager.close()


def test_a_crash_mid_move_recovers_the_copy_from_its_checkpointed_recovery_point(
    tmp_path: Path,
) -> None:
    dirs, manager = opened(tmp_path)
    log = manager.get_or_create("t", 0)
    for seq in range(0, 60, 2):
        produce(log, idempotent(1, seq))
    move = start(manager, ("t", 0), dirs[1])
    copy(manager, move, max_bytes=100, rounds=20)
    future = move.future
    assert future is not None and 0 < future.log_end_offset < log.log_end_offset
    rolled = future.active_segment.base_offset
    assert len(future.segments) > 2 and future.recovery_point == 0
    for pending in manager.flushes(T0):  # the future's rolled segments, as any log's
        run_chore(pending)
    assert future.recovery_point == rolled
    manager.checkpoint()
    # A crash: no close, no clean-shutdown marker; the checkpoint is in the copy's directory.
    assert OffsetCheckpointFile(dirs[1] / RECOVERY_POINT_CHECKPOINT).read() == {("t", 0): rolled}
    manager.handles.close_all()

    _, again = opened(tmp_path)
    resumed = again.moves[("t", 0)].future
    assert resumed is not None and resumed.recovery_point == rolled
    assert resumed.recovery_stats["recovered_segments"] == 1  # the active one, not the copy
    current = again.get("t", 0)
    assert current is not None
    expected = read_all(current)
    copy(again, again.moves[("t", 0)], max_bytes=100)
    new = again.replace_current_with_future(again.moves[("t", 0)])
    assert new is not None and read_all(new) == expected
    again.close()
