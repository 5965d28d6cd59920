"""LogManager: the log directories, every partition log in them, and their checkpoints.

This module owns the mapping ``(topic, partition) -> PartitionLog`` over one or more log
directories (Kafka's ``LogManager``): finding partition directories at start-up, recovering
them (skipping the scan after a clean shutdown), placing new partitions in the directory with
the fewest, deleting partitions, the per-directory checkpoint files (recovery points, high
watermarks, log start offsets, cleaner offsets), the clean-shutdown marker, and the periodic
chores the broker triggers (retention; and as :class:`~storage.chore.Chore` s, whose slow part
the broker runs off its event loop: flushes of rolled segments and by ``flush.ms``, compaction,
checkpoints, removal of deleted partitions' directories). All logs share one
:class:`~storage.file_handles.FileHandles` pool, so open descriptors stay bounded by
``max_open_files`` however many partitions exist.

It must not decide which partitions should exist or which replica leads (the broker does).
Synchronous and not thread-safe, like the logs.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from storage.checkpoints import (
    CorruptCheckpointError,
    OffsetCheckpointFile,
    has_clean_shutdown,
    remove_clean_shutdown,
    write_clean_shutdown,
)
from storage.chore import RemoveDirectories, run_chore
from storage.cleaner import DEFAULT_MAX_MAP_KEYS, Compaction
from storage.clock import Clock, wall_clock_ms
from storage.config import LogConfig
from storage.errors import KafkaStorageError, StorageError
from storage.file_handles import FileHandles
from storage.layout import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    is_delete_dir,
    parse_partition_dir,
    partition_dir_name,
)
from storage.partition_log import PartitionLog, PendingFlush

__all__ = ["CheckpointWrite", "LogManager", "TopicPartition"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


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
        self._logs: dict[TopicPartition, PartitionLog] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        self._per_dir: dict[Path, int] = dict.fromkeys(self.log_dirs, 0)
        #: Per log directory: did the last shutdown leave the clean-shutdown marker?
        self.had_clean_shutdown: dict[Path, bool] = {}
        self._opened = False

    def config_for(self, topic: str) -> LogConfig:
        if self._topic_config is not None:
            return self._topic_config(topic)
        return self.default_config

    # ---- start-up --------------------------------------------------------------------------

    def open(self) -> None:
        """Load every partition directory of every log directory (recovering as needed)."""
        for log_dir in self.log_dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
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
            if clean:
                remove_clean_shutdown(log_dir)
        self._opened = True

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
        """The partition's log, created (empty) in the least-used log directory if missing.
        A given `config` replaces the log's config."""
        tp = (topic, partition)
        existing = self._logs.get(tp)
        if existing is not None:
            if config is not None and config != existing.config:
                existing.update_config(config)
            return existing
        log_dir = min(self.log_dirs, key=self._per_dir.__getitem__)
        path = log_dir / partition_dir_name(topic, partition)
        try:
            plog = PartitionLog.open(
                path,
                config or self.config_for(topic),
                handles=self.handles,
                now_ms=self._now_ms,
                had_clean_shutdown=True,
            )
        except OSError as e:
            raise KafkaStorageError(f"cannot create {path}: {e}") from e
        self._logs[tp] = plog
        self._dir_of[tp] = log_dir
        self._per_dir[log_dir] += 1
        return plog

    def delete_partition(self, topic: str, partition: int) -> bool:
        """Remove the partition's log: its directory is renamed now and removed by the next
        :meth:`removal_chore`. False if there was none."""
        tp = (topic, partition)
        plog = self._logs.pop(tp, None)
        log_dir = self._dir_of.pop(tp, None)
        if plog is None or log_dir is None:
            return False
        self._per_dir[log_dir] -= 1
        self._to_remove.append(plog.delete())
        return True

    def partitions(self) -> list[TopicPartition]:
        return sorted(self._logs)

    def logs(self) -> Iterator[tuple[TopicPartition, PartitionLog]]:
        return iter(list(self._logs.items()))

    def log_dir_of(self, topic: str, partition: int) -> Path | None:
        return self._dir_of.get((topic, partition))

    def __len__(self) -> int:
        return len(self._logs)

    # ---- chores ----------------------------------------------------------------------------

    def begin_checkpoint(self) -> CheckpointWrite:
        """Every log directory's offset checkpoint files (Kafka's four), as a chore."""
        files: dict[Path, dict[TopicPartition, int]] = {}
        for log_dir in self.log_dirs:
            logs = {tp: lg for tp, lg in self._logs.items() if self._dir_of[tp] == log_dir}
            files[log_dir / RECOVERY_POINT_CHECKPOINT] = {
                tp: lg.recovery_point for tp, lg in logs.items()
            }
            files[log_dir / REPLICATION_OFFSET_CHECKPOINT] = {
                tp: lg.high_watermark for tp, lg in logs.items()
            }
            files[log_dir / LOG_START_OFFSET_CHECKPOINT] = {
                tp: lg.log_start_offset
                for tp, lg in logs.items()
                if lg.log_start_offset > lg.segments[0].base_offset
            }
            files[log_dir / CLEANER_OFFSET_CHECKPOINT] = {
                tp: lg.cleaner_checkpoint for tp, lg in logs.items() if lg.config.compact
            }
        return CheckpointWrite(files)

    def checkpoint(self) -> None:
        """Write the checkpoint files on this thread (see :meth:`begin_checkpoint`)."""
        run_chore(self.begin_checkpoint())

    def run_retention(self, now_ms: int) -> int:
        """Apply retention to every log; returns the number of segments deleted."""
        return sum(lg.apply_retention(now_ms) for _tp, lg in self.logs())

    def compactions(self, now_ms: int) -> Iterator[Compaction]:
        """The compaction passes due now, made one at a time (each after the previous one
        committed). A log whose pass filled the offset map gets its next pass at once."""
        for _tp, lg in self.logs():
            while not lg.closed and lg.config.compact:
                pass_ = lg.begin_compaction(now_ms, max_map_keys=self.max_map_keys)
                if pass_ is None:
                    break
                checkpoint = lg.cleaner_checkpoint
                yield pass_
                if not pass_.map_filled or lg.cleaner_checkpoint <= checkpoint:
                    break

    def flushes(self, now_ms: int) -> Iterator[PendingFlush]:
        """Flushes of logs due by ``flush.ms`` and of logs with unflushed rolled segments
        (Kafka flushes a segment once it rolls), made one at a time."""
        for _tp, lg in self.logs():
            if lg.closed:
                continue
            if now_ms - lg.last_flush_ms >= lg.config.flush_ms:
                pending = lg.begin_flush()
            elif lg.recovery_point < lg.active_segment.base_offset:
                pending = lg.begin_flush(lg.active_segment.base_offset)
            else:
                continue
            if pending is not None:
                yield pending

    def removal_chore(self) -> RemoveDirectories | None:
        """The removal of the directories of deleted partitions, if any are waiting."""
        if not self._to_remove:
            return None
        paths, self._to_remove = self._to_remove, []
        return RemoveDirectories(paths)

    # ---- shutdown --------------------------------------------------------------------------

    def close(self) -> None:
        """Close every log, make it all durable with one file-system sync (a group commit of
        the whole shutdown instead of an fsync per file), write the checkpoints, then the
        clean-shutdown marker of each log directory whose logs all closed cleanly."""
        failed: set[Path] = set()
        closed = []
        for tp, lg in self.logs():
            try:
                lg.close(fsync=False)
                closed.append(lg)
            except (OSError, StorageError):
                log.exception("closing %s-%s failed", *tp)
                failed.add(self._dir_of[tp])
        os.sync()
        for lg in closed:
            lg.mark_flushed()
        self.checkpoint()
        for log_dir in self.log_dirs:
            if log_dir not in failed:
                write_clean_shutdown(log_dir, self.broker_epoch)
        removal = self.removal_chore()
        if removal is not None:
            run_chore(removal)
        self.handles.close_all()
        self._logs.clear()
        self._dir_of.clear()
        self._per_dir = dict.fromkeys(self.log_dirs, 0)

    def statistics(self) -> dict[str, int]:
        stats = {"partitions": len(self._logs)}
        stats.update({f"files_{k}": v for k, v in self.handles.statistics().items()})
        return stats


class CheckpointWrite:
    """Offset checkpoint files to write, a :class:`~storage.chore.Chore`: the offsets are
    copied when it is made; :meth:`prepare` writes (and fsyncs) the files."""

    def __init__(self, files: Mapping[Path, Mapping[TopicPartition, int]]) -> None:
        self.files = files

    def prepare(self) -> None:
        for path, offsets in self.files.items():
            try:
                OffsetCheckpointFile(path).write(offsets)
            except OSError as e:
                raise KafkaStorageError(f"cannot write checkpoint {path}: {e}") from e

    def abort(self) -> None:
        pass  # a few small files: let them be written

    def commit(self) -> None:
        pass
