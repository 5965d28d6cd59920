"""LogMove: one replica moving to another log directory of this broker (Kafka's future replica).

This module owns a move's state and its steps (Kafka's ``Partition.maybeCreateFutureReplica``,
``ReplicaAlterLogDirsThread``, ``LogManager.replaceCurrentWithFutureLog``): the future log in
the destination directory, named ``<topic>-<partition>.<uuid>-future`` as Kafka names it
(:meth:`LogMove.make_future`, a new directory, so it may run in a worker thread as
:class:`~storage.log_manager.CreateLogs` does), filled from the current log by follower appends
(:meth:`LogMove.next_read` gives the current log's slices from the future's log end offset; the
caller reads their bytes off the loop and appends them with
:meth:`PartitionLog.begin_follower_append`), which keep every batch as it is -- offsets and
compacted gaps, epochs, timestamps -- and rebuild the producer state, leader epochs and
transaction index as a follower's do. The swap itself is the log manager's
(:meth:`~storage.log_manager.LogManager.replace_current_with_future`).

A move a stop interrupted is resumed at the next start from what its future log holds (the
log manager reopens it). A truncation of the current log (a follower truncating to its leader;
a crash's recovery cutting the tail below the copy's end) voids the copy:
:meth:`LogMove.restart_needed` says so, and the caller begins the move again, with a new
future log (the voided one is removed like a deleted partition's).

It must not decide when a move starts or how it is driven (the broker does); synchronous,
no threads of its own.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from storage.file_handles import FileHandles
from storage.layout import future_dir_name
from storage.partition_log import PartitionLog
from storage.results import ReadResult

__all__ = ["LogMove"]

TopicPartition = tuple[str, int]

#: Files of a partition directory that are not the log's and go along (the topic id).
_PARTITION_FILES = ("partition.metadata",)


class LogMove:
    """The move of `current` (the log of `tp`) into `dest_dir`; :attr:`future` once made."""

    def __init__(
        self,
        tp: TopicPartition,
        current: PartitionLog,
        dest_dir: Path,
        future: PartitionLog | None = None,
    ) -> None:
        """A new move, or with `future` one resumed after a restart (its log reopened)."""
        self.tp = tp
        self.current = current
        self.dest_dir = dest_dir
        self.future_path = dest_dir / future_dir_name(*tp) if future is None else future.dir
        self.future = future
        #: Replaced by another move or given up: its driver stops and removes the future log.
        self.cancelled = False
        self._truncations = current.truncations

    # ---- facts (for DescribeLogDirs) -------------------------------------------------------

    @property
    def size_in_bytes(self) -> int:
        return 0 if self.future is None else self.future.size_in_bytes

    @property
    def offset_lag(self) -> int:
        """Kafka's DescribeLogDirs ``OffsetLag``: the current log end minus the future's."""
        copied = 0 if self.future is None else self.future.log_end_offset
        return max(0, self.current.log_end_offset - copied)

    # ---- steps -----------------------------------------------------------------------------

    def make_future(
        self, handles: FileHandles, now_ms: Callable[[], int], created_ms: int
    ) -> PartitionLog:
        """The empty future log, created (with a copy of the partition's topic id file) in a
        new directory, so this may run in a worker thread; the caller sets :attr:`future` to
        it on the loop."""
        self.future_path.mkdir()
        for name in _PARTITION_FILES:
            source = self.current.dir / name
            if source.exists():
                shutil.copyfile(source, self.future_path / name)
        return PartitionLog.create(
            self.future_path,
            self.current.config,
            handles=handles,
            now_ms=now_ms,
            created_ms=created_ms,
        )

    def restart_needed(self) -> bool:
        """The current log was truncated since the copy began, or ends below the copy (a crash
        cut its tail): the copy may hold batches it no longer has, the caller begins the move
        again."""
        future = self.future
        return self.current.truncations != self._truncations or (
            future is not None and future.log_end_offset > self.current.log_end_offset
        )

    @property
    def caught_up(self) -> bool:
        return self.future is not None and self.future.log_end_offset == self.current.log_end_offset

    def next_read(self, max_bytes: int) -> ReadResult | None:
        """The current log's slices from where the future log ends (or the current log starts,
        if later), at most `max_bytes` (a first larger batch whole); None when there is
        nothing to copy now. Release the result."""
        assert self.future is not None
        current = self.current
        offset = max(self.future.log_end_offset, current.log_start_offset)
        if offset >= current.log_end_offset:
            return None
        return current.read(offset, max_bytes)

    def read_from(self) -> int:
        """The offset :meth:`next_read` reads from (for the caller's cold-read lookup)."""
        assert self.future is not None
        return max(self.future.log_end_offset, self.current.log_start_offset)
