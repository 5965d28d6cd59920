"""Chore: storage's slow disk work, split so that the log's thread never waits on the disk.

This module owns the one boundary between a log's thread (the broker's event loop) and a worker
thread. Kafka runs the same work on scheduler threads: the flush of a rolled segment, the offset
checkpoints, the log cleaner, the removal of deleted logs. A chore is made on the log's thread
by the storage object whose state it concerns (``PartitionLog.begin_flush``,
``PartitionLog.begin_compaction``, ``LogManager.begin_checkpoint``, ...), which copies what the
slow part needs -- paths, sizes, offsets, checkpoint lines -- and then:

* :meth:`Chore.prepare` does the slow part (fsync, writing checkpoint files, building cleaned
  segments, unlinking deleted segments' files, removing directories). It touches no state of any log, so it may run in a worker
  thread while the logs keep appending, reading, truncating and deleting;
* :meth:`Chore.commit` runs back on the log's thread, *always* after ``prepare`` (also when
  ``prepare`` raised), and is short: it applies the result if it still holds -- the log may have
  changed meanwhile -- and otherwise discards it;
* :meth:`Chore.abort`, from any thread, asks a running ``prepare`` to stop early (a broker
  shutting down need not wait for a compaction); ``commit`` then discards what it did.

The broker runs ``prepare`` with ``trio.to_thread.run_sync`` and then ``commit``; storage itself
(shutdown) and tests run both inline with :func:`run_chore`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from storage.checkpoints import fsync_dir

__all__ = [
    "Chore",
    "Chores",
    "RemoveDeleted",
    "SegmentFileWork",
    "SegmentRenames",
    "SegmentTrims",
    "run_chore",
]

log = logging.getLogger(__name__)


class Chore(Protocol):
    """Slow work prepared off the log's thread, committed on it (see the module doc)."""

    def prepare(self) -> None:
        """The slow part; thread-safe: touches files only, no log state."""

    def abort(self) -> None:
        """Ask a running :meth:`prepare` to stop early (thread-safe; a no-op once it is done)."""

    def commit(self) -> None:
        """On the log's thread, after :meth:`prepare` returned or raised: apply or discard."""


def run_chore(chore: Chore) -> None:
    """Run `chore` on this thread: prepare, then commit (also when prepare raised)."""
    try:
        chore.prepare()
    finally:
        chore.commit()


class Chores:
    """Several chores run as one (one worker-thread call for all: a thread hop costs the loop
    more than a small chore's work). Each is prepared, then each committed, in order; a
    :meth:`prepare` that raises does not stop the others, and the first error is raised after
    them all."""

    def __init__(self, chores: list[Chore]) -> None:
        self.chores = chores

    def prepare(self) -> None:
        error: BaseException | None = None
        for chore in self.chores:
            try:
                chore.prepare()
            except Exception as e:
                error = error or e
        if error is not None:
            raise error

    def abort(self) -> None:
        for chore in self.chores:
            chore.abort()

    def commit(self) -> None:
        for chore in self.chores:
            chore.commit()


class SegmentFileWork:
    """A few file operations per segment (made by the log), each segment's made once and
    whole: in a chore's worker thread (:meth:`run`), or on the log's thread
    (:meth:`run_here`) when it needs the files before the worker got to them. A lock makes
    each segment's operations happen on one thread or the other. A file missing is skipped;
    any other failure is kept in `failed` (the chore reports it)."""

    __slots__ = ("_lock", "_left", "failed")

    def __init__(self, segments: list[list[tuple[Path, Path]]] | list[list[tuple[Path, int]]]):
        self._lock = threading.Lock()
        self._left: list[list[tuple[Path, Path]]] | list[list[tuple[Path, int]]] = segments
        self.failed: list[tuple[Path, OSError]] = []

    @property
    def done(self) -> bool:
        return not self._left

    def run(self) -> None:
        """Make the segments' operations one segment at a time (a worker thread)."""
        while True:
            with self._lock:
                if not self._left:
                    return
                self._make(self._left.pop(0))

    def run_here(self, *, cancel: bool = False) -> list[tuple[Path, OSError]]:
        """Make what is left now, after the segment being made elsewhere (if any); with
        `cancel`, make nothing more. The failures so far."""
        with self._lock:
            left, self._left = self._left, []
            if not cancel:
                for operations in left:
                    self._make(operations)
            return list(self.failed)

    def _make(self, operations: list[tuple[Path, Path]] | list[tuple[Path, int]]) -> None:
        for path, to in operations:
            try:
                if isinstance(to, int):
                    os.truncate(path, to)
                else:
                    os.rename(path, to)
            except FileNotFoundError:
                continue
            except OSError as e:
                self.failed.append((path, e))


class SegmentRenames(SegmentFileWork):
    """The renames of one log's deleted segments' files to ``.deleted`` (made by
    ``PartitionLog.take_renames``): each segment's files, its ``.log`` first (recovery finds a
    segment by its ``.log``: without it the others are orphans it removes), in the removal
    chore's worker thread -- or on the log's thread when it needs their names or their
    directory first: a truncation that may make a segment of the same base offset, a close, a
    deletion of the partition (which cancels them). A file that cannot be renamed is left to
    recovery: under its live name, below the log start."""

    __slots__ = ()


class SegmentTrims(SegmentFileWork):
    """A rolled segment's files cut to their data (``LogSegment.become_inactive``): its
    indexes from ``segment.index.bytes`` to their entries, its ``.log`` from ``segment.bytes``
    with ``preallocate``, in the roll work's worker thread (:mod:`storage.roll_work`) -- or on
    the log's thread first when the segment's files change size again there (it becomes
    active again, its indexes are rebuilt, it closes). Until then the files hold their data
    followed by zeros, which every reader skips (an index load stops at the zeros). A cut
    that fails only leaves those zeros."""

    __slots__ = ()


class RemoveDeleted:
    """Remove what the log's thread already took out of readers' way: deleted segments'
    files (renamed to ``*.deleted`` first, here by `renames` for the segments deleted from the
    start of their logs since the last removal; their descriptors, taken out of the file
    handle pool, closed here first: `descriptors`), producer
    snapshots below the log start offset, and deleted partitions' directories
    (``<topic>-<p>.<uuid>-delete``), whose log directory is then fsynced (the rename and the
    removal survive a crash). Renaming hundreds of files, unlinking a large file or
    ``rmtree`` of what may be gigabytes is this chore's :meth:`prepare`; whatever is left (an
    abort, a failed unlink) is removed by recovery at the next start. A file that cannot be
    renamed or unlinked, or a directory whose removal cannot be made durable, is logged and
    passed to `on_error` on the log's thread, at :meth:`commit`."""

    def __init__(
        self,
        files: list[Path],
        directories: list[Path],
        on_error: Callable[[Path, OSError], None] | None = None,
        renames: list[SegmentRenames] | None = None,
        descriptors: list[int] | None = None,
    ) -> None:
        self.files = files
        self.descriptors = descriptors or []
        self.directories = directories
        self.on_error = on_error
        self.renames = renames or []
        self.failed: list[tuple[Path, OSError]] = []
        self._aborted = False

    def prepare(self) -> None:
        for fd in self.descriptors:  # always, even aborted: the log's thread forgot them
            with contextlib.suppress(OSError):
                os.close(fd)
        for renames in self.renames:  # before the unlinks: some are of the files renamed here
            renames.run()
        for path in self.files:
            if self._aborted:
                return
            try:
                path.unlink(missing_ok=True)
            except OSError as e:  # its directory may be deleted or offline meanwhile
                self.failed.append((path, e))
        for path in self.directories:
            if self._aborted:
                return
            shutil.rmtree(path, ignore_errors=True)
        # One fsync per log directory (keyed by it, each with one of its removed directories).
        for parent, path in {path.parent: path for path in self.directories}.items():
            try:
                fsync_dir(parent)
            except OSError as e:
                self.failed.append((path, e))

    def abort(self) -> None:
        self._aborted = True  # what is left is removed at the next start (``LogManager.open``)

    def commit(self) -> None:
        for renames in self.renames:
            self.failed += renames.failed
        for path, error in self.failed:
            log.error("cannot remove %s (the next start removes it): %s", path, error)
            if self.on_error is not None:
                self.on_error(path, error)
