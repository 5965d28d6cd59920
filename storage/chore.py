"""Chore: storage's slow disk work, split so that the log's thread never waits on the disk.

This module owns the one boundary between a log's thread (the broker's event loop) and a worker
thread. Kafka runs the same work on scheduler threads: the flush of a rolled segment, the offset
checkpoints, the log cleaner, the removal of deleted logs. A chore is made on the log's thread
by the storage object whose state it concerns (``PartitionLog.begin_flush``,
``PartitionLog.begin_compaction``, ``LogManager.begin_checkpoint``, ...), which copies what the
slow part needs -- paths, sizes, offsets, checkpoint lines -- and then:

* :meth:`Chore.prepare` does the slow part (fsync, writing checkpoint files, building cleaned
  segments, removing directories). It touches no state of any log, so it may run in a worker
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

import shutil
from pathlib import Path
from typing import Protocol

__all__ = ["Chore", "RemoveDirectories", "run_chore"]


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


class RemoveDirectories:
    """Remove directories already renamed out of the way (``<topic>-<p>.<uuid>-delete``): the
    rename happened on the log's thread, the ``rmtree`` of what may be gigabytes is this
    chore's :meth:`prepare`."""

    def __init__(self, paths: list[Path]) -> None:
        self.paths = paths

    def prepare(self) -> None:
        for path in self.paths:
            shutil.rmtree(path, ignore_errors=True)

    def abort(self) -> None:
        pass  # what is left is removed at the next start (``LogManager.open``)

    def commit(self) -> None:
        pass
