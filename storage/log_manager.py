"""LogManager: the log directories, every partition log in them, and their checkpoints.

This module owns the mapping ``(topic, partition) -> PartitionLog`` over one or more log
directories (Kafka's ``LogManager``): finding partition directories at start-up, recovering
them (skipping the scan after a clean shutdown), placing new partitions in the directory with
the fewest (or the one asked for: AlterReplicaLogDirs before the partition was here) and
creating their logs (:class:`CreateLogs`, a chore, so that the broker makes a thousand of them
in one worker-thread call), moving stray logs aside (Kafka's ``-stray`` directories: kept,
skipped at start-up, never reused as a new partition's), deleting partitions, moving a
partition's log to another log directory (:class:`~storage.log_move.LogMove`: the moves under
way, whose logs compaction leaves alone meanwhile as Kafka pauses its cleaner, and the swap of
a caught-up future log for the current one; a ``-future`` directory found at start-up, a move
a stop interrupted, is reopened and the move resumed, as Kafka does), the per-directory
checkpoint files (recovery points, high watermarks, log start offsets, cleaner offsets), the
clean-shutdown marker, and the periodic chores the broker triggers (retention; and as
:class:`~storage.chore.Chore` s, whose slow part the broker runs off its event loop: flushes of
rolled segments and by ``flush.ms``, compaction, checkpoints, unlinking deleted segments' files
and removing deleted partitions' directories, and the next segments logs ask to have prepared
ahead of their rolls). All logs share one :class:`~storage.file_handles.FileHandles` pool, so
open descriptors stay bounded by ``max_open_files`` however many partitions exist.

A full disk or a failed write degrades, it never stops the broker: a chore that fails for one
log is logged and retried at its next run (checkpoints included), and shutdown writes a log
directory's clean-shutdown marker only if every log in it closed, its checkpoints were written
and its file system reports no write-back error since :meth:`LogManager.open` (``syncfs``), so
the next start recovers whatever may not have reached the disk. Any other I/O error than a full
disk (EIO, EROFS, ...) takes its whole log directory offline until a restart, as Kafka's
LogDirFailureChannel does: its logs are abandoned and answer :class:`KafkaStorageError`, new
partitions go to the other directories. The broker stays up even when none is left.

It must not decide which partitions should exist or which replica leads (the broker does).
Synchronous and not thread-safe, like the logs.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from storage.checkpoints import (
    CorruptCheckpointError,
    OffsetCheckpointFile,
    has_clean_shutdown,
    remove_clean_shutdown,
    write_clean_shutdown,
)
from storage.chore import Chore, Chores, RemoveDeleted, run_chore
from storage.clock import Clock, wall_clock_ms
from storage.config import DEFAULT_MAX_MAP_KEYS, LogConfig
from storage.errors import KafkaStorageError, StorageError
from storage.file_handles import FileHandles
from storage.layout import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    is_delete_dir,
    is_future_dir,
    is_stray_dir,
    parse_partition_dir,
    partition_dir_name,
    stray_dir_name,
)
from storage.log_move import LogMove
from storage.partition_log import PartitionLog, PendingFlush
from storage.write_back import syncfs

if TYPE_CHECKING:
    from storage.cleaner import Compaction
    from storage.segment import TimestampReads

__all__ = ["CheckpointWrite", "CreateLogs", "LogManager", "TopicPartition"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

#: A full disk or quota: the log directory stays online, its writes resume once space is freed.
_OUT_OF_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


def _os_error(error: BaseException | None) -> OSError | None:
    """The ``OSError`` behind `error` (itself or a cause), if any."""
    while error is not None and not isinstance(error, OSError):
        error = error.__cause__
    return error


class LogManager:
    """All partition logs of this broker; call :meth:`open` before use, :meth:`close` after."""

    def __init__(
        self,
        log_dirs: list[Path],
        default_config: LogConfig,
        *,
        max_open_files: int | None = None,
        now_ms: Clock = wall_clock_ms,
        topic_config: Callable[[str], LogConfig] | None = None,
        broker_epoch: int = -1,
        max_map_keys: int = DEFAULT_MAX_MAP_KEYS,
    ) -> None:
        if not log_dirs:
            raise ValueError("at least one log directory is needed")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.default_config = default_config
        self.handles = FileHandles(max_open_files)
        self._now_ms = now_ms
        self._topic_config = topic_config
        self.broker_epoch = broker_epoch
        #: The cleaner's offset map bound (see :func:`storage.cleaner.max_map_keys`).
        self.max_map_keys = max_map_keys
        self._to_remove: list[Path] = []  # renamed ``-delete`` directories
        self._creating: set[TopicPartition] = set()  # in a CreateLogs not committed yet
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        self._per_dir: dict[Path, int] = dict.fromkeys(self.log_dirs, 0)
        #: The moves of logs to another log directory under way (see :mod:`storage.log_move`).
        self.moves: dict[TopicPartition, LogMove] = {}
        #: Where a partition's log goes when it is created (AlterReplicaLogDirs before the
        #: partition was here: Kafka's preferred log directories); taken by the creation.
        self.preferred_dirs: dict[TopicPartition, Path] = {}
        #: Per log directory: did the last shutdown leave the clean-shutdown marker?
        self.had_clean_shutdown: dict[Path, bool] = {}
        #: A descriptor per log directory, open from :meth:`open` to :meth:`close`, through
        #: which shutdown learns of any write-back error in between.
        self._dir_fds: dict[Path, int] = {}
        #: Log directories an I/O error took offline (until a restart).
        self.offline_dirs: set[Path] = set()
        #: Told of each directory taken offline, on the caller's thread, once its logs are
        #: abandoned (in a cluster the broker tells the controller; it must not block).
        self.on_dir_offline: Callable[[Path], None] | None = None
        #: Told (on the caller's thread, must not block) when a log asks for its roll work
        #: (:mod:`storage.roll_work`): the broker then runs :meth:`begin_roll_work` off the
        #: loop. An ask made while it is None (before the broker set it, or in a tool that
        #: never does) waits for the next :meth:`begin_roll_work`: a log asks once until then,
        #: and a future log holding roll work is never swapped in.
        self.on_roll_work: Callable[[], None] | None = None
        self._roll_work: list[PartitionLog] = []
        self._opened = False

    def config_for(self, topic: str) -> LogConfig:
        if self._topic_config is not None:
            return self._topic_config(topic)
        return self.default_config

    # ---- start-up --------------------------------------------------------------------------

    def open(self) -> None:
        """Load every partition directory of every log directory (recovering as needed), then
        the future logs of the moves a stop interrupted (:attr:`moves`, to resume)."""
        futures: list[tuple[Path, Path, dict[TopicPartition, int], dict[TopicPartition, int]]] = []
        for log_dir in self.log_dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
            self._dir_fds[log_dir] = os.open(log_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            clean = has_clean_shutdown(log_dir)
            self.had_clean_shutdown[log_dir] = clean
            recovery = self._read_checkpoint(log_dir / RECOVERY_POINT_CHECKPOINT)
            replication = self._read_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT)
            starts = self._read_checkpoint(log_dir / LOG_START_OFFSET_CHECKPOINT)
            cleaner = self._read_checkpoint(log_dir / CLEANER_OFFSET_CHECKPOINT)
            with os.scandir(log_dir) as it:
                entries = sorted(e.name for e in it if e.is_dir())
            for name in entries:
                path = log_dir / name
                if is_delete_dir(name):
                    self._to_remove.append(path)
                    continue
                if is_future_dir(name):
                    futures.append((log_dir, path, recovery, starts))
                    continue
                if is_stray_dir(name):
                    log.warning("Found stray log %s (kept aside; remove it once not needed)", path)
                    continue
                tp = parse_partition_dir(name)
                if tp is None:
                    continue
                if tp in self._logs:
                    raise StorageError(
                        f"duplicate log directories for {tp[0]}-{tp[1]}: "
                        f"{self._dir_of[tp]} and {log_dir}"
                    )
                self._logs[tp] = PartitionLog.open(
                    path,
                    self.config_for(tp[0]),
                    handles=self.handles,
                    now_ms=self._now_ms,
                    had_clean_shutdown=clean,
                    recovery_point=recovery.get(tp, 0),
                    log_start_offset=starts.get(tp, 0),
                    high_watermark=replication.get(tp),
                    cleaner_checkpoint=cleaner.get(tp),
                )
                self._dir_of[tp] = log_dir
                self._per_dir[log_dir] += 1
                self._logs[tp].on_roll_work = self._roll_work_wanted
        for log_dir, path, recovery, starts in futures:
            self._resume_move(log_dir, path, recovery, starts)
        for log_dir in self.log_dirs:
            if self.had_clean_shutdown[log_dir]:
                remove_clean_shutdown(log_dir)
        self._opened = True

    def _resume_move(
        self,
        log_dir: Path,
        path: Path,
        recovery: Mapping[TopicPartition, int],
        starts: Mapping[TopicPartition, int],
    ) -> None:
        """Reopen the future log in `path` (recovered from its recovery point in `log_dir`'s
        checkpoint, `recovery`, with its log start offset from `starts`) and resume its move,
        if its partition's log is here, in another directory, and ends no lower (else the copy
        is removed)."""
        tp = parse_partition_dir(path.name.rsplit(".", 1)[0])
        current = None if tp is None else self._logs.get(tp)
        if tp is None or current is None or tp in self.moves or self._dir_of[tp] == log_dir:
            log.warning("Removing %s: no move of a log here to resume", path)
            self._to_remove.append(path)
            return
        try:
            future = PartitionLog.open(
                path,
                current.config,
                handles=self.handles,
                now_ms=self._now_ms,
                had_clean_shutdown=self.had_clean_shutdown[log_dir],
                recovery_point=recovery.get(tp, 0),
                log_start_offset=starts.get(tp, 0),
            )
        except StorageError as e:
            log.warning("Removing %s, a move's copy that cannot be opened: %s", path, e)
            self._to_remove.append(path)
            return
        move = LogMove(tp, current, log_dir, future)
        if move.restart_needed():  # the current log ends below the copy: begun again
            log.warning("Removing %s: its log ends below it; the move begins again", path)
            future.abandon()
            self._to_remove.append(path)
            move = LogMove(tp, current, log_dir)
        else:
            future.on_roll_work = self._roll_work_wanted
        self.moves[tp] = move
        log.info("Resuming the move of %s-%d to %s", *tp, log_dir)

    @staticmethod
    def _read_checkpoint(path: Path) -> dict[TopicPartition, int]:
        try:
            return OffsetCheckpointFile(path).read()
        except (CorruptCheckpointError, OSError) as e:
            log.warning("ignoring unreadable checkpoint %s: %s", path, e)
            return {}

    # ---- partitions ------------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def get_or_create(
        self, topic: str, partition: int, config: LogConfig | None = None
    ) -> PartitionLog:
        """The partition's log, created (empty) on this thread if missing (see
        :meth:`begin_create`; KafkaStorageError if it cannot be). A given `config` replaces
        the log's config."""
        tp = (topic, partition)
        existing = self._logs.get(tp)
        if existing is not None:
            if config is not None and config != existing.config:
                existing.update_config(config)
            return existing
        creation = self.begin_create({tp: config or self.config_for(topic)})
        run_chore(creation)
        if tp in creation.failed:
            raise creation.failed[tp]
        return self._logs[tp]

    def begin_create(
        self,
        partitions: Mapping[TopicPartition, LogConfig],
        init: Callable[[TopicPartition, Path], None] | None = None,
    ) -> CreateLogs:
        """The creation of new, empty logs for `partitions`, as a chore: each is placed now in
        the online log directory with the fewest partitions (those being created counted);
        :meth:`CreateLogs.prepare` makes them (and calls `init` with each new directory, e.g.
        to write its topic id), :meth:`CreateLogs.commit` adds them to the manager. A partition
        that has a log or is being created already is left out; one that cannot be placed (no
        log directory online) is in ``failed`` at once. ValueError, and nothing begun, if one
        cannot name a directory (:func:`~storage.layout.partition_dir_problem`: the caller
        checks first)."""
        names = {tp: partition_dir_name(*tp) for tp in partitions}
        creation = CreateLogs(self, init, self._now_ms())
        online = [d for d in self.log_dirs if d not in self.offline_dirs]
        for tp, config in partitions.items():
            if tp in self._logs or tp in self._creating:
                continue
            if not online:
                creation.failed[tp] = KafkaStorageError(
                    f"cannot create {tp[0]}-{tp[1]}: no log directory is online"
                )
                continue
            preferred = self.preferred_dirs.pop(tp, None)
            if preferred in online:
                log_dir = preferred
            else:
                log_dir = min(online, key=self._per_dir.__getitem__)
            self._per_dir[log_dir] += 1
            self._creating.add(tp)
            creation.pending[tp] = (log_dir / names[tp], config)
        return creation

    def mark_stray(self, topic: str, partition: int) -> Path | None:
        """Move the partition's log aside as a stray one (Kafka's ``-stray`` directory, kept,
        never reused nor deleted): the broker found it belongs to no topic it has. Its new
        path, or None if there was no log."""
        plog = self._detach((topic, partition))
        if plog is None:
            return None
        old = plog.dir
        target = plog.delete(stray=True)
        log.warning("Log in %s marked stray and renamed to %s", old, target)
        return target

    def delete_partition(self, topic: str, partition: int) -> bool:
        """Remove the partition's log: its directory is renamed now and removed by the next
        :meth:`removal_chore`, which also makes both durable (an fsync of the log directory,
        off the loop). False if there was none."""
        plog = self._detach((topic, partition))
        if plog is None:
            return False
        self._to_remove.append(plog.delete())
        return True

    def _detach(self, tp: tuple[str, int]) -> PartitionLog | None:
        """Stop managing the partition's log (its directory stays): the log, or None."""
        move = self.moves.get(tp)
        if move is not None:
            self.drop_move(move)
        plog = self._logs.pop(tp, None)
        log_dir = self._dir_of.pop(tp, None)
        if plog is None or log_dir is None:
            return None
        self._per_dir[log_dir] -= 1
        return plog

    def handle_log_error(self, topic: str, partition: int, error: BaseException) -> None:
        """Tell the manager an operation on a partition's log failed (Kafka's
        LogDirFailureChannel): an I/O error other than a full disk takes its log directory
        offline."""
        log_dir = self._dir_of.get((topic, partition))
        if log_dir is not None:
            self._maybe_take_offline(log_dir, error)

    def handle_dir_error(self, log_dir: Path, error: BaseException) -> None:
        """Tell the manager an operation in `log_dir` failed (a move's future log): an I/O
        error other than a full disk takes it offline."""
        self._maybe_take_offline(log_dir, error)

    def _maybe_take_offline(self, log_dir: Path, error: BaseException) -> None:
        cause = _os_error(error)
        if cause is None or cause.errno in _OUT_OF_SPACE or log_dir in self.offline_dirs:
            return
        log.error("log directory %s failed, offline until a restart: %s", log_dir, error)
        self.offline_dirs.add(log_dir)
        for move in list(self.moves.values()):
            if log_dir in (move.dest_dir, self._dir_of.get(move.tp)):
                self.drop_move(move)
        for tp, lg in self._logs.items():
            if self._dir_of[tp] == log_dir:
                lg.abandon()
                lg.offline = True
        if self.on_dir_offline is not None:
            self.on_dir_offline(log_dir)

    def partitions(self) -> list[TopicPartition]:
        return sorted(self._logs)

    def logs(self) -> Iterator[tuple[TopicPartition, PartitionLog]]:
        return iter(list(self._logs.items()))

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        return self._dir_of.get((topic, partition))

    def __len__(self) -> int:
        return len(self._logs)

    # ---- moves between log directories -----------------------------------------------------

    def begin_move(self, topic: str, partition: int, dest_dir: Path) -> LogMove:
        """Start moving the partition's log into `dest_dir` (another online log directory of
        this manager): a :class:`LogMove`, whose future log the caller makes and fills; any
        other move of the partition is dropped first."""
        tp = (topic, partition)
        current = self._logs[tp]
        previous = self.moves.get(tp)
        if previous is not None:
            self.drop_move(previous)
        move = LogMove(tp, current, dest_dir)
        self.moves[tp] = move
        return move

    def future_made(self, move: LogMove, future: PartitionLog) -> bool:
        """Give `move` its future log (made by :meth:`LogMove.make_future`): its rolls'
        file work is prepared off the loop as every log's. False if the move was dropped
        meanwhile (the new log is removed)."""
        move.future = future
        if move.cancelled:
            self.drop_move(move)
            return False
        future.on_roll_work = self._roll_work_wanted
        return True

    def drop_move(self, move: LogMove) -> None:
        """Give `move` up (replaced, its partition deleted, a directory failed): it is
        cancelled, and its future log's directory renamed for the removal chore."""
        move.cancelled = True
        if self.moves.get(move.tp) is move:
            del self.moves[move.tp]
        future = move.future
        if future is not None and not future.closed:
            if future.writing:  # its worker thread's commit finds it closed
                future.abandon()
                self._to_remove.append(move.future_path)
            else:
                self._to_remove.append(future.delete())

    def replace_current_with_future(self, move: LogMove) -> PartitionLog | None:
        """Swap the future log of `move` in for the current one, if it has caught up and
        neither log has file work under way (else None: the caller copies on and asks again);
        on this thread, at once (Kafka's replaceCurrentWithFutureLog). The future directory is
        renamed to the partition's name first, then the current one for deletion (a crash in
        between leaves two whole copies, which the next start refuses to choose between, never
        none); the caller makes both renames durable off the loop (the removal chore fsyncs
        the old directory's parent). The new log is returned; the caller's references to the
        old one must follow."""
        tp = move.tp
        future = move.future
        current = self._logs.get(tp)
        if (
            move.cancelled
            or future is None
            or current is not move.current
            or not move.caught_up
            or move.restart_needed()
            or current.writing
            or not future.relocatable
        ):
            return None
        try:
            future.relocate(move.dest_dir / partition_dir_name(*tp))
        except OSError as e:
            log.error("cannot move %s into place, the move is given up: %s", future.dir, e)
            self.drop_move(move)
            self._maybe_take_offline(move.dest_dir, e)
            return None
        future.take_over_from(current)
        del self.moves[tp]
        old_dir = self._dir_of[tp]
        try:
            self._to_remove.append(current.delete())
        except OSError as e:  # the old copy stays whole: the next start finds two
            log.error("cannot rename %s for deletion: %s", current.dir, e)
            self._maybe_take_offline(old_dir, e)
        self._logs[tp] = future
        self._dir_of[tp] = move.dest_dir
        self._per_dir[old_dir] -= 1
        self._per_dir[move.dest_dir] += 1
        log.info("Moved %s-%d from %s to %s", *tp, old_dir, move.dest_dir)
        return future

    # ---- chores ----------------------------------------------------------------------------

    def begin_checkpoint(self) -> CheckpointWrite:
        """Every online log directory's offset checkpoint files (Kafka's four), as a chore. The
        recovery points and log start offsets include the future logs of the moves into the
        directory, as Kafka's do (a future log is in another directory than its partition's
        log, so the partition names one log per file): a restart in the middle of a move
        recovers its copy from its recovery point, not from its start."""
        files: dict[Path, dict[Path, dict[TopicPartition, int]]] = {}
        for log_dir in self.log_dirs:
            if log_dir in self.offline_dirs:
                continue
            logs = {tp: lg for tp, lg in self._logs.items() if self._dir_of[tp] == log_dir}
            with_futures = logs | {
                tp: m.future
                for tp, m in self.moves.items()
                if m.dest_dir == log_dir and m.future is not None and not m.future.closed
            }
            files[log_dir] = {
                log_dir / RECOVERY_POINT_CHECKPOINT: {
                    tp: lg.recovery_point for tp, lg in with_futures.items()
                },
                log_dir / REPLICATION_OFFSET_CHECKPOINT: {
                    tp: lg.high_watermark for tp, lg in logs.items()
                },
                log_dir / LOG_START_OFFSET_CHECKPOINT: {
                    tp: lg.log_start_offset
                    for tp, lg in with_futures.items()
                    if lg.log_start_offset > lg.segments[0].base_offset
                },
                log_dir / CLEANER_OFFSET_CHECKPOINT: {
                    tp: lg.cleaner_checkpoint for tp, lg in logs.items() if lg.config.compact
                },
            }
        return CheckpointWrite(self, files)

    def checkpoint(self) -> set[Path]:
        """Write the checkpoint files on this thread (see :meth:`begin_checkpoint`). Returns
        the directories where that failed (logged; their old files stay until a later call),
        offline ones included."""
        chore = self.begin_checkpoint()
        run_chore(chore)
        return set(self.offline_dirs) | set(chore.failed)

    def chore_failed(self, what: str, plog: PartitionLog, error: BaseException) -> None:
        """A chore of `plog` (a flush, a compaction pass) failed: logged, and retried at its
        next run, so one full or failing disk never stops the others; an I/O error other than
        a full disk takes the log's directory offline."""
        log.error("%s of %s failed (retried later): %s", what, plog.dir.name, error)
        self._maybe_take_offline(plog.dir.parent, error)

    def _each_log(self, chore: str, run: Callable[[PartitionLog], int]) -> int:
        """Sum of `run` over every online log no worker thread writes (a truncation, a
        follower's append: :attr:`PartitionLog.writing`); a log it fails for is logged
        and skipped (the chore's next run retries it)."""
        total = 0
        for tp, lg in self.logs():
            if lg.offline or lg.writing:
                continue
            try:
                total += run(lg)
            except (OSError, StorageError) as e:
                log.error("%s of %s-%d failed (retried later): %s", chore, tp[0], tp[1], e)
                self._maybe_take_offline(self._dir_of[tp], e)
        return total

    def retention_reads(self, now_ms: int) -> list[TimestampReads]:
        """What :meth:`run_retention` at `now_ms` would read on the disk (the largest
        timestamps of old segments: :meth:`PartitionLog.retention_reads`), for the caller to
        read in a worker thread first."""
        return [
            reads
            for _tp, lg in self.logs()
            if not (lg.offline or lg.writing) and (reads := lg.retention_reads(now_ms))
        ]

    def run_retention(self, now_ms: int) -> int:
        """Apply retention to every log; returns the number of segments deleted."""
        return self._each_log("retention", lambda lg: lg.apply_retention(now_ms))

    def compactions(self, now_ms: int) -> Iterator[Compaction]:
        """The compaction passes due now, made one at a time (each after the previous one
        committed)."""
        for _tp, lg in self.logs():
            yield from self.log_compactions(lg, now_ms)

    def log_compactions(self, lg: PartitionLog, now_ms: int) -> Iterator[Compaction]:
        """One log's compaction passes due now, each made after the previous one committed: a
        pass that filled the offset map gets the next at once. Passes of different logs may
        run at the same time (each prepares with its own file handles)."""
        paused = lg.topic_partition in self.moves  # Kafka's abortAndPauseCleaning
        while not (paused or lg.closed or lg.offline or lg.writing) and lg.config.compact:
            try:
                pass_ = lg.begin_compaction(now_ms, max_map_keys=self.max_map_keys)
            except (OSError, StorageError) as e:
                self.chore_failed("compaction", lg, e)
                break
            if pass_ is None:
                break
            checkpoint = lg.cleaner_checkpoint
            yield pass_
            if not pass_.map_filled or lg.cleaner_checkpoint <= checkpoint:
                break

    def write_index_entries(self) -> None:
        """Write the active segments' new index entries to their files (not fsynced), so a
        reader of the files (Kafka's DumpLogSegments) finds them about as soon as in a running
        Kafka's memory-mapped indexes. The broker calls it every second; a failure is left to
        the next flush, roll or close."""
        for _tp, lg in self.logs():
            if lg.closed or lg.offline or lg.writing:
                continue
            seg = lg.active_segment
            if seg.indexes_unwritten:
                with contextlib.suppress(OSError):
                    seg.persist_indexes()

    def flushes(self, now_ms: int) -> Iterator[PendingFlush]:
        """Flushes of logs due by ``flush.ms`` and of logs with unflushed rolled segments
        (Kafka flushes a segment once it rolls), made one at a time; the future logs of moves
        too, as Kafka's (their recovery points advance with the copy)."""
        futures = [m.future for m in self.moves.values() if m.future is not None]
        for lg in [lg for _tp, lg in self.logs()] + futures:
            if lg.closed or lg.offline or lg.writing:
                continue
            try:
                if now_ms - lg.last_flush_ms >= lg.config.flush_ms:
                    pending = lg.begin_flush()
                elif lg.recovery_point < lg.active_segment.base_offset:
                    pending = lg.begin_flush(lg.active_segment.base_offset)
                else:
                    continue
            except (OSError, StorageError) as e:
                self.chore_failed("flush", lg, e)
                continue
            if pending is not None:
                yield pending

    def _roll_work_wanted(self, plog: PartitionLog) -> None:
        self._roll_work.append(plog)
        if self.on_roll_work is not None:
            self.on_roll_work()

    def begin_roll_work(self) -> Chores | None:
        """The roll work the logs asked for since the last call (see :mod:`storage.roll_work`),
        as one chore, or None if there is none."""
        wanted, self._roll_work = self._roll_work, []
        works: list[Chore] = []
        for plog in wanted:
            if not (plog.closed or plog.offline):
                work = plog.begin_roll_work()
                if work is not None:
                    works.append(work)
        return Chores(works) if works else None

    def removal_chore(self, now_ms: int) -> RemoveDeleted | None:
        """The renaming to ``.deleted`` of the segments deleted from the start of their logs
        (see :meth:`PartitionLog.take_renames`), the unlinking of deleted segments' files due
        by `now_ms` (see :meth:`PartitionLog.take_deleted_files`) and the removal of deleted
        partitions' directories, if any are waiting; first it closes the descriptors of
        deleted segments' files (:meth:`PartitionLog.take_descriptors`). A file it fails to rename or unlink with
        an I/O error takes its log directory offline, as Kafka's async delete does."""
        renames = []
        files: list[Path] = []
        descriptors: list[int] = []
        for _tp, lg in self.logs():
            if not (lg.closed or lg.offline):
                if (taken := lg.take_renames()) is not None:
                    renames.append(taken)
                files += lg.take_deleted_files(now_ms)
                descriptors += lg.take_descriptors()
        if not (files or renames or descriptors or self._to_remove):
            return None
        directories, self._to_remove = self._to_remove, []
        return RemoveDeleted(files, directories, self._removal_failed, renames, descriptors)

    def _removal_failed(self, path: Path, error: OSError) -> None:
        log_dir = next((d for d in self.log_dirs if d in path.parents), None)
        if log_dir is not None:
            self._maybe_take_offline(log_dir, error)

    # ---- shutdown --------------------------------------------------------------------------

    def close(self) -> None:
        """Close every log, make it all durable with one file-system sync per log directory (a
        group commit of the whole shutdown instead of an fsync per file), write the
        checkpoints, then the clean-shutdown marker of each log directory where all of that
        succeeded and no write-back error was reported since :meth:`open`. The future logs of
        moves under way are closed likewise, for the next start to resume them."""
        failed = set(self.offline_dirs)
        closed = []
        futures = [(m.dest_dir, m.future) for m in self.moves.values() if m.future is not None]
        self.moves.clear()
        for log_dir, lg in [(self._dir_of[tp], lg) for tp, lg in self.logs()] + futures:
            if lg.offline or lg.closed:
                continue
            try:
                if lg.writing:  # a worker's append never committed: recovery cuts it
                    raise StorageError(f"{lg.dir.name} is being written")
                lg.close(fsync=False)
                closed.append((log_dir, lg))
            except (OSError, StorageError) as e:
                log.error("closing %s failed, the next start recovers it: %s", lg.dir.name, e)
                failed.add(log_dir)
        for log_dir in self.log_dirs:
            try:
                self._sync(log_dir)
            except OSError as e:
                log.error("%s: write-back failed, the next start recovers it: %s", log_dir, e)
                failed.add(log_dir)
        for log_dir, lg in closed:
            if log_dir not in failed:
                lg.mark_flushed()
        failed |= self.checkpoint()
        for log_dir in self.log_dirs:
            if log_dir not in failed:
                self._write_clean_shutdown(log_dir)
        removal = self.removal_chore(self._now_ms())  # the logs are closed: directories only
        if removal is not None:
            run_chore(removal)
        self.handles.close_all()
        self._logs.clear()
        self._dir_of.clear()
        self._per_dir = dict.fromkeys(self.log_dirs, 0)

    def _sync(self, log_dir: Path) -> None:
        fd = self._dir_fds.pop(log_dir, None)
        if fd is None:  # never opened: only errors from now on are seen
            fd = os.open(log_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            syncfs(fd)
        finally:
            os.close(fd)

    def _write_clean_shutdown(self, log_dir: Path) -> None:
        try:
            write_clean_shutdown(log_dir, self.broker_epoch)
        except OSError as e:
            log.error("%s: cannot write the clean-shutdown marker: %s", log_dir, e)
            try:
                remove_clean_shutdown(log_dir)  # a partial marker must not skip recovery
            except OSError:
                log.exception("%s: cannot remove a partial clean-shutdown marker", log_dir)

    def statistics(self) -> dict[str, int]:
        stats = {"partitions": len(self._logs)}
        stats.update({f"files_{k}": v for k, v in self.handles.statistics().items()})
        return stats


class CheckpointWrite:
    """Offset checkpoint files to write, a :class:`~storage.chore.Chore`: the offsets are
    copied when it is made; :meth:`prepare` writes (and fsyncs) each log directory's files,
    and :meth:`commit` reports the directories where that failed (``failed``) to the manager,
    which retries them at the next checkpoint or takes them offline."""

    def __init__(
        self,
        manager: LogManager,
        files: Mapping[Path, Mapping[Path, Mapping[TopicPartition, int]]],
    ) -> None:
        self.manager = manager
        self.files = files
        self.failed: dict[Path, OSError] = {}

    def prepare(self) -> None:
        for log_dir, dir_files in self.files.items():
            try:
                for path, offsets in dir_files.items():
                    OffsetCheckpointFile(path).write(offsets)
            except OSError as e:
                self.failed[log_dir] = e

    def abort(self) -> None:
        pass  # a few small files: let them be written

    def commit(self) -> None:
        for log_dir, e in self.failed.items():
            log.error("cannot write the checkpoints in %s (retried later): %s", log_dir, e)
            self.manager._maybe_take_offline(log_dir, e)


class CreateLogs:
    """New, empty partition logs to make, a :class:`~storage.chore.Chore` made by
    :meth:`LogManager.begin_create` with each partition's directory (``pending``).

    :meth:`prepare` makes each directory, calls the manager's `init` with it, and creates the
    log in it (:meth:`PartitionLog.create`: only the first segment's three files, nothing
    looked for, about 8 system calls where opening a directory takes some 30); it may run in a
    worker thread because a new, empty directory has nothing to recover: the new log creates
    its own files and only names them in the shared
    :class:`~storage.file_handles.FileHandles` pool, whose state (open descriptors) stays the
    log's thread's, and reads no clock (the time is read when the creation is begun). A
    directory already there that the manager does not hold (left by a crash or a creation
    whose commit never ran) is not reused: it is renamed ``-stray`` first, as Kafka moves a
    stray log aside. A log that cannot be made (a full disk; `init` failing too) has its new
    directory removed again, so that a later creation does not find it stray. :meth:`commit`
    adds the new logs to the manager (``created``) and reports the others in ``failed``
    (:class:`KafkaStorageError`; an I/O error other than a full disk takes the log directory
    offline)."""

    def __init__(
        self,
        manager: LogManager,
        init: Callable[[TopicPartition, Path], None] | None,
        now_ms: int,
    ) -> None:
        self.manager = manager
        self.init = init
        self.now_ms = now_ms
        self.pending: dict[TopicPartition, tuple[Path, LogConfig]] = {}
        self.created: dict[TopicPartition, PartitionLog] = {}
        self.failed: dict[TopicPartition, KafkaStorageError] = {}
        self._errors: dict[TopicPartition, BaseException] = {}

    def prepare(self) -> None:
        manager = self.manager
        for tp, (path, config) in self.pending.items():
            try:
                _make_empty_dir(tp, path)
            except OSError as e:
                self._errors[tp] = e
                continue
            try:
                if self.init is not None:
                    self.init(tp, path)
                self.created[tp] = PartitionLog.create(
                    path,
                    config,
                    handles=manager.handles,
                    now_ms=manager._now_ms,
                    created_ms=self.now_ms,
                )
            except (OSError, StorageError) as e:
                self._errors[tp] = e
                shutil.rmtree(path, ignore_errors=True)  # made here: the next try starts afresh

    def abort(self) -> None:
        pass  # a few empty directories: let them be made

    def commit(self) -> None:
        manager = self.manager
        for tp, (path, _config) in self.pending.items():
            manager._creating.discard(tp)
            log_dir = path.parent
            plog = self.created.get(tp)
            if plog is None:
                manager._per_dir[log_dir] -= 1
                cause = self._errors.get(tp)
                error = KafkaStorageError(f"cannot create {path}: {cause}")
                error.__cause__ = cause
                self.failed[tp] = error
                manager._maybe_take_offline(log_dir, error)
                continue
            manager._logs[tp] = plog
            manager._dir_of[tp] = log_dir
            plog.on_roll_work = manager._roll_work_wanted
            if log_dir in manager.offline_dirs:  # it went offline meanwhile
                plog.abandon()
                plog.offline = True


def _make_empty_dir(tp: TopicPartition, path: Path) -> None:
    """Make `path`, a new partition directory; one already there is renamed ``-stray``."""
    try:
        path.mkdir()
    except FileExistsError:
        stray = path.with_name(stray_dir_name(*tp))
        os.rename(path, stray)
        log.warning("Log in %s marked stray and renamed to %s", path, stray)
        path.mkdir()
